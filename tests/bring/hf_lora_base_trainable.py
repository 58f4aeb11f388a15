"""The LoRA example's broken twin: the user wraps the base with PEFT, then sets every parameter trainable.

A real pattern ("make sure everything trains" after ``get_peft_model``, or unfreezing by a name filter that
matches too much): the base trains with the adapter, and an adapter-only checkpoint or export would not
hold what changed. The pilot must fail at its update gate ("base model unchanged").
"""

from pathlib import Path

from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from cockpit.integrations import hf

EXAMPLE = Path(__file__).resolve().parents[2] / "campaigns" / "hf-lora"


def model(params):
    base = AutoModelForCausalLM.from_pretrained(EXAMPLE / "base", local_files_only=True)
    lora = LoraConfig(
        r=params["lora_r"], lora_alpha=2 * params["lora_r"], target_modules="all-linear", task_type="CAUSAL_LM"
    )
    peft = get_peft_model(base, lora)
    for p in peft.parameters():
        p.requires_grad = True  # the bug: the base is no longer frozen
    return peft


task = hf.causal_lm(
    model=model,
    tokenizer=EXAMPLE / "base",
    data={"train": EXAMPLE / "data/train.jsonl", "validation": EXAMPLE / "data/val.jsonl"},
    max_length=16,
    group_unit="phrase",
)
