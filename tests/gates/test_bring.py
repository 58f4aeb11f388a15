"""Bring your code: the Hugging Face, PEFT and Lightning helpers, TrainingArguments, adapters, in this process.

Tiny random-init models (GPT-2 from a config, a Lightning MLP), a word-level tokenizer built here with the
``tokenizers`` library, data made here: nothing is downloaded. The example campaigns themselves are piloted,
trained, compared and archived as real processes in ``tests/integration/test_bring_campaigns.py``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from cockpit.cli import main as cli
from cockpit.integrations import training_args as ta

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {"hf-lora": "task.py", "hf-classifier": "task.py", "lightning": "task.py"}
PARAMS = {"microbatch": 4, "accumulation": 2, "lr": 3e-3, "device": "cpu", "updates": 20, "eval_microbatch": 8}


def code_lines(path: Path) -> int:
    """Lines of code in a file: no blank lines, comments or docstrings (what a user writes and reads)."""
    source = path.read_text()
    tree = ast.parse(source)
    doc_lines: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                doc_lines.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return sum(
        1
        for i, line in enumerate(source.splitlines(), 1)
        if line.strip() and not line.strip().startswith("#") and i not in doc_lines
    )


# --------------------------------------------------------------------------- no import cost, few lines


def test_import_cockpit_never_imports_transformers_peft_or_lightning() -> None:
    code = (
        "import sys\n"
        "import cockpit, cockpit.cli, cockpit.integrations, cockpit.integrations.hf\n"
        "import cockpit.integrations.lightning, cockpit.integrations.training_args, cockpit.pilot.task\n"
        "print([m for m in ('transformers', 'peft', 'lightning', 'pytorch_lightning') if m in sys.modules])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("campaign", sorted(EXAMPLES))
def test_each_example_is_at_most_15_lines_of_user_code(campaign: str) -> None:
    n = code_lines(ROOT / "campaigns" / campaign / EXAMPLES[campaign])
    assert n <= 15, f"campaigns/{campaign}/{EXAMPLES[campaign]}: {n} lines of code"


def test_example_data_is_what_make_examples_writes() -> None:
    from tests import make_examples as mk

    for folder, data in ((mk.LORA, mk.lora_data()), (mk.CLASSIFIER, mk.classifier_data())):
        for split, rows in data.items():
            written = (folder / "data" / f"{split}.jsonl").read_text().splitlines()
            assert [json.loads(x) for x in written] == rows, (folder, split)


# --------------------------------------------------------------------------- TrainingArguments


def test_training_arguments_become_batch_and_training() -> None:
    c = ta.convert(
        {
            "per_device_train_batch_size": 4,
            "per_device_eval_batch_size": 16,
            "gradient_accumulation_steps": 8,
            "learning_rate": 2e-4,
            "weight_decay": 0.01,
            "lr_scheduler_type": "cosine",
            "warmup_ratio": 0.1,
            "bf16": True,
            "gradient_checkpointing": True,
            "max_steps": 300,
            "max_grad_norm": 0.5,
            "eval_strategy": "steps",
            "eval_steps": 50,
            "save_steps": 100,
            "save_total_limit": 3,
            "seed": 7,
            "output_dir": "out",
        }
    )
    assert c.batch == {"microbatch": 4, "accumulation": 8, "eval_microbatch": 16, "drop_last": False, "updates": 300}
    assert c.training == {
        "lr": 2e-4,
        "weight_decay": 0.01,
        "optimizer": "adamw",
        "schedule": "cosine",
        "warmup_updates": 30,
        "precision": "bf16",
        "activation_checkpointing": True,
        "grad_clip": 0.5,
    }
    assert c.validation == {"every_updates": 50} and c.checkpoints == {"every_updates": 100, "keep": 3}
    assert c.seed == 7 and c.notes == []


def test_what_training_arguments_cannot_carry_is_named() -> None:
    c = ta.convert(
        {
            "num_train_epochs": 2,
            "warmup_ratio": 0.05,
            "lr_scheduler_type": "polynomial",
            "optim": "adafactor",
            "label_smoothing_factor": 0.1,
            "adam_beta2": 0.95,
        }
    )
    assert c.batch["epochs"] == 2 and c.batch["microbatch"] == 8  # Hugging Face's defaults where unset
    said = " ".join(c.notes)
    for word in ("warmup_ratio", "polynomial", "adafactor", "label_smoothing_factor", "adam_beta2"):
        assert word in said, (word, said)
    assert ta.convert({"num_train_epochs": 2, "warmup_ratio": 0.05}, dataset_size=160).training["warmup_updates"] == 2
    with pytest.raises(ta.TrainingArgsError, match="bf16 and fp16"):
        ta.convert({"bf16": True, "fp16": True})


def test_cockpit_new_from_training_args(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4, "max_steps": 40}))
    assert cli(["new", "ft", "--dir", str(tmp_path), "--from-training-args", str(args), "--task", "task.py:task"]) == 0
    from cockpit import notebook

    nb = notebook.load(tmp_path / "ft")
    assert nb.task.entry == "task.py:task"
    assert (nb.batch.microbatch, nb.batch.accumulation, nb.batch.updates) == (2, 4, 40)
    assert nb.training.lr == 5e-5 and nb.training.schedule == "linear"  # Hugging Face's defaults
    assert [v.id for v in nb.variants] == ["as-trained", "lr-half", "lr-double"]
    (tmp_path / "bad.json").write_text("{not json")
    assert cli(["new", "ft2", "--dir", str(tmp_path), "--from-training-args", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert "bad.json: not JSON" in err and "Traceback" not in err
    assert not (tmp_path / "ft2" / "campaign.toml").exists()


# --------------------------------------------------------------------------- Hugging Face: causal LM, LoRA

WORDS = ["one", "two", "three", "four", "five", "six", "un", "deux", "trois", "quatre", "cinq", "six6", "say", ":"]
EN_FR = dict(zip(WORDS[:6], WORDS[6:12], strict=True))


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "<s>", "</s>", *WORDS])}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]", bos_token="<s>", eos_token="</s>"
    )


def pairs() -> dict[str, list[dict[str, Any]]]:
    rows = [
        {"id": f"{a}-{b}", "prompt": f"say : {a} {b}", "answer": f"{EN_FR[a]} {EN_FR[b]}"}
        for a in EN_FR
        for b in EN_FR
        if a != b
    ]
    return {"train": rows[:24], "validation": rows[24:]}


def gpt2(tokenizer: Any) -> Any:
    from transformers import GPT2Config

    return GPT2Config(vocab_size=len(tokenizer), n_positions=16, n_embd=32, n_layer=1, n_head=2, resid_pdrop=0.0,
                      embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=2, eos_token_id=3)  # fmt: skip


def test_causal_lm_masks_the_prompt_and_decodes_spans(tokenizer: Any) -> None:
    from cockpit.integrations import hf

    task = hf.causal_lm(gpt2(tokenizer), tokenizer, pairs(), max_length=16)
    data = task.datasets({})
    assert set(data) == {"train", "val"}  # "validation" is Cockpit's "val"
    batch = task.collate([data["train"][0], {"prompt": "say : one", "answer": "un"}], {})
    eos = tokenizer.eos_token_id
    assert batch["input_ids"][0].tolist() == tokenizer("say : one two")["input_ids"] + tokenizer(
        "un deux", add_special_tokens=False
    )["input_ids"] + [eos]
    assert (
        batch["labels"][0].tolist()[:5] == [-100] * 5
        and batch["labels"][0].tolist()[5:] == batch["input_ids"][0].tolist()[5:]
    )
    assert batch["labels"][1].tolist()[-2:] == [-100, -100] and batch["attention_mask"][1].tolist()[-2:] == [0, 0]
    assert task.decode(batch, 0) == [("<s> say : one two", False), (" un deux </s>", True)]
    with pytest.raises(hf.HelperError, match="no field 'answer'"):
        task.collate([{"id": "x", "prompt": "say : one"}], {})


# --------------------------------------------------------------------------- Hugging Face: classification


def test_sequence_classification_takes_label_names_from_the_config(tokenizer: Any) -> None:
    from transformers import BertConfig

    from cockpit.integrations import hf

    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, id2label={0: "small", 1: "large"})  # fmt: skip
    data = {"train": [{"text": "one two", "label": "small"}, {"text": "five six", "label": 1}]}
    task = hf.sequence_classification(config, tokenizer, data)
    assert task.label_names == ["small", "large"] and task.kind == "classification"
    batch = task.collate(task.datasets({})["train"], {})
    assert batch["labels"].tolist() == [0, 1] and batch["input_ids"].shape[0] == 2
    assert task.decode(batch, 0) == "one two"
    with pytest.raises(hf.HelperError, match="'medium' is none of the label names"):
        task.collate([{"id": "x", "text": "one", "label": "medium"}], {})
    with pytest.raises(hf.HelperError, match="label 2.5 is not a class"):  # int() used to truncate it to 2
        task.collate([{"id": "x", "text": "one", "label": 2.5}], {})
    with pytest.raises(hf.HelperError, match="some examples of one batch hold one label and others a list"):
        task.collate([{"text": "one", "label": 1}, {"text": "two", "label": [1]}], {})
    # several labels per example (problem_type="multi_label_classification"): float multi-hot rows, as HF's
    # BCE-with-logits loss takes them; the collate used to call int() on the list and raise a TypeError
    multi = [{"text": "one", "label": [1, 1]}, {"text": "two", "label": ["large"]}, {"text": "six", "label": []}]
    batch = task.collate(multi, {})
    assert batch["labels"].dtype == torch.float32 and batch["labels"].tolist() == [[1, 1], [0, 1], [0, 0]]
    with pytest.raises(hf.HelperError, match="no label names"):
        hf.sequence_classification(lambda p: None, tokenizer, data)
    with pytest.raises(hf.HelperError, match="downloads nothing"):
        hf.sequence_classification("no/such/folder", tokenizer, data)


# --------------------------------------------------------------------------- Lightning


class _Scheduled:
    def __init__(self) -> None:
        self.steps = 0

    def step(self) -> None:
        self.steps += 1

    def state_dict(self) -> dict[str, int]:
        return {"steps": self.steps}

    def load_state_dict(self, st: dict[str, int]) -> None:
        self.steps = st["steps"]


def test_configure_optimizers_forms_and_an_epoch_scheduler() -> None:
    from cockpit.integrations import lightning as lt

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    sched = _Scheduled()
    assert lt._read_optimizers(opt)[:3] == (opt, None, "epoch")
    assert lt._read_optimizers(([opt], [sched]))[:3] == (opt, sched, "epoch")
    assert (
        lt._read_optimizers({"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}})[2] == "step"
    )
    with pytest.raises(lt.LightningHelperError, match="2 optimizers"):
        lt._read_optimizers([opt, opt])
    every = lt._Every(sched, 5, "per epoch")
    for _ in range(12):
        every.step()
    assert sched.steps == 2 and every.state_dict()["count"] == 12
    again = lt._Every(_Scheduled(), 5, "per epoch")
    again.load_state_dict(every.state_dict())
    assert again.count == 12 and again.inner.steps == 2


@pytest.mark.parametrize("campaign", ["hf-lora", "lightning"])
def test_the_readme_shows_each_example_as_it_is(campaign: str) -> None:
    readme = (ROOT / "docs" / "bring.md").read_text()
    block = readme.split(f"<!-- bring:{campaign}:start -->\n```python\n", 1)[1].split(
        f"```\n<!-- bring:{campaign}:end -->"
    )[0]
    assert block == (ROOT / "campaigns" / campaign / EXAMPLES[campaign]).read_text()


def test_the_data_view_shows_generated_text_beside_the_target() -> None:
    from rich.console import Console

    from cockpit.tui.screens.data import example_view

    view = example_view(
        {
            "split": "val",
            "id": "v1",
            "text": [["<s> say : one", False], [" un </s>", True]],
            "target": " un </s>",
            "generated": "deux",
        },  # fmt: skip
        80,
    )
    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(view)
    text = console.export_text()
    assert "target  un </s>" in text and "generated deux" in text and text.index("target") < text.index("generated")
