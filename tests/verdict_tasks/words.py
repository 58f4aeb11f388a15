"""Copy tasks over a small word vocabulary and a word-level tokenizer built with the tokenizers package (no hub)."""

from __future__ import annotations

import random
from typing import Any

WORDS = [f"w{i}" for i in range(48)]


def copy_pairs(n_train: int = 96, n_val: int = 16, seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(seed)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for split, n in (("train", n_train), ("val", n_val)):
        for i in range(n):
            ws = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
            out[split].append({"id": f"{split}{i}", "prompt": "copy " + " ".join(ws), "answer": " ".join(ws)})
    return out


def tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "<s>", "</s>"]
    vocab = {w: i for i, w in enumerate([*specials, "copy", *WORDS])}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]", bos_token="<s>", eos_token="</s>"
    )
