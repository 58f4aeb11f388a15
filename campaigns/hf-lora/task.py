"""A Hugging Face causal LM fine-tuned with a LoRA adapter: English -> French phrases, the prompt masked."""

from peft import LoraConfig

from cockpit.integrations import hf

task = hf.causal_lm(
    model="base",  # a local folder (config.json, model.safetensors): nothing is downloaded
    tokenizer="base",
    data={"train": "data/train.jsonl", "validation": "data/val.jsonl", "test": "data/test.jsonl"},
    prompt="prompt",
    answer="answer",
    adapter=lambda p: LoraConfig(
        r=p["lora_r"], lora_alpha=2 * p["lora_r"], target_modules="all-linear", task_type="CAUSAL_LM"
    ),
    max_length=16,
    group_unit="phrase",
)
