"""Tiny synthetic data for the shelf's families: a few dozen examples with ids and groups, the same on every machine.

Nothing here is downloaded: text pairs come from the standard library's source (``pairs``), a character
tokenizer is built with Hugging Face ``tokenizers`` (the fast tokenizer class transformers users load),
and images, audio and tables are drawn from a generator seeded by the example's index.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.shelf.pairs import pairs

CHARS = [chr(c) for c in range(32, 127)]
PAD, EOS, UNK = 0, 1, 2
STOI = {c: i + 3 for i, c in enumerate(CHARS)}
VOCAB = len(CHARS) + 3


def char_tokenizer() -> Any:
    """A transformers fast tokenizer over printable characters: pad 0, end of sequence 1."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": PAD, "</s>": EOS, "<unk>": UNK, **STOI}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tk.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def encode(text: str) -> list[int]:
    return [STOI.get(c, UNK) for c in text]


def text_pairs(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """prompt -> answer pairs (``reverse word: drow``), ids and groups; a few dozen of them."""
    return pairs(int(params.get("train_examples", 48)), int(params.get("val_examples", 16)))


def pad(rows: list[list[int]], value: int, width: int | None = None) -> torch.Tensor:
    width = width or max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r[:width], dtype=torch.long)
    return out


def split(n_train: int, n_val: int, make: Any, groups: int = 1) -> dict[str, list[dict[str, Any]]]:
    """``make(i)`` -> an example's fields for i in 0..n; ids ``train-0003``, one group per ``groups`` examples."""
    out: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for i in range(n_train + n_val):
        name = "train" if i < n_train else "val"
        out[name].append({"id": f"{name}-{i:04d}", "group": f"g{i // groups:04d}", **make(i)})
    return out


def generator(i: int, salt: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(1_000_003 * salt + i)
