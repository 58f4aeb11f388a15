"""Write the assets of the "Bring your code" example campaigns: data, local tokenizers, a tiny base model.

    python -m tests.make_examples        # (re)writes campaigns/hf-lora/{base,data}, campaigns/hf-classifier/{model,data}

Everything is made here, nothing is downloaded: word-level tokenizers built with the ``tokenizers``
library, JSON-lines data generated from fixed word lists, and for the LoRA example a tiny
Llama-style base model (random init, seed 0, about 90,000 parameters) saved with ``save_pretrained``,
standing in for the pretrained checkpoint a user fine-tunes. ``tests/gates/test_bring.py`` checks that the
data and tokenizer files are what this script writes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LORA = ROOT / "campaigns" / "hf-lora"
CLASSIFIER = ROOT / "campaigns" / "hf-classifier"

EN_FR = {
    "red": "rouge",
    "blue": "bleu",
    "green": "vert",
    "black": "noir",
    "white": "blanc",
    "cat": "chat",
    "dog": "chien",
    "house": "maison",
    "bread": "pain",
    "water": "eau",
    "one": "un",
    "two": "deux",
}
PREFIXES = ["translate :", "in french :"]

TOPICS = {
    "animals": ["cat", "dog", "horse", "bird", "fish", "cow", "sheep", "goat"],
    "food": ["bread", "cheese", "apple", "soup", "rice", "cake", "pasta", "salad"],
    "sports": ["football", "tennis", "rugby", "golf", "hockey", "boxing", "cycling", "rowing"],
}
FILLER = ["i", "we", "they", "like", "saw", "talked", "about", "the", "a", "today", "again", "some", "really", "and"]


def lora_data() -> dict[str, list[dict[str, Any]]]:
    """Word-by-word English -> French of two-word phrases, under two prompt wordings.

    The phrase is the leakage group: both wordings of a phrase fall in one split.
    """
    pairs = [(a, b) for a in EN_FR for b in EN_FR if a != b]
    random.Random(0).shuffle(pairs)
    cut = {"train": pairs[:100], "val": pairs[100:116], "test": pairs[116:132]}
    out: dict[str, list[dict[str, Any]]] = {}
    for split, chosen in cut.items():
        rows = []
        for a, b in chosen:
            for k, prefix in enumerate(PREFIXES):
                rows.append(
                    {
                        "id": f"{split}-{a}-{b}-{k}",
                        "group": f"{a} {b}",
                        "prompt": f"{prefix} {a} {b}",
                        "answer": f"{EN_FR[a]} {EN_FR[b]}",
                    }
                )
        out[split] = rows
    return out


def classifier_data() -> dict[str, list[dict[str, Any]]]:
    """Short sentences about one topic each, the topic's name as the label."""
    rng = random.Random(1)
    seen: set[str] = set()
    out: dict[str, list[dict[str, Any]]] = {}
    for split, n in (("train", 240), ("val", 48), ("test", 48)):
        rows = []
        while len(rows) < n:
            topic = rng.choice(sorted(TOPICS))
            words = [rng.choice(FILLER) for _ in range(rng.randint(2, 6))]
            for _ in range(rng.randint(1, 2)):
                words.insert(rng.randint(0, len(words)), rng.choice(TOPICS[topic]))
            text = " ".join(words)
            if text in seen:
                continue
            seen.add(text)
            rows.append({"id": f"{split}-{len(rows):04d}", "text": text, "label": topic})
        out[split] = rows
    return out


def word_tokenizer(words: list[str], folder: Path, *, bos: bool, cls: bool) -> None:
    """A word-level tokenizer over ``words`` (plus its special tokens), saved as a transformers tokenizer folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "<s>", "</s>"] if bos else ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    vocab = {w: i for i, w in enumerate(specials + sorted(set(words)))}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if bos:
        tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
        fast = PreTrainedTokenizerFast(
            tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]", bos_token="<s>", eos_token="</s>"
        )
    else:
        assert cls
        tk.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
        )
        fast = PreTrainedTokenizerFast(
            tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]"
        )
    folder.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(folder)


def write_jsonl(folder: Path, data: dict[str, list[dict[str, Any]]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in data.items():
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")


def lora_words() -> list[str]:
    return [w for p in PREFIXES for w in p.split()] + list(EN_FR) + list(EN_FR.values()) + ["=", ";"]


def classifier_words() -> list[str]:
    return [w for ws in TOPICS.values() for w in ws] + FILLER


def pretraining_corpus() -> list[str]:
    """What the base model "knew" before the user's fine-tuning: a dictionary and copying, not the task."""
    rng = random.Random(2)
    lines = [f"{en} = {fr}" for en, fr in EN_FR.items()] * 8
    words = list(EN_FR) + list(EN_FR.values())
    for _ in range(200):
        seq = " ".join(rng.choice(words) for _ in range(rng.randint(2, 4)))
        lines.append(f"{seq} ; {seq}")
    rng.shuffle(lines)
    return lines


def lora_base(folder: Path) -> None:
    """The tiny Llama-style base the LoRA example adapts: seed 0, pretrained briefly on the corpus above."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    lines = pretraining_corpus()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(400):
        chunk = [lines[(step * 16 + i) % len(lines)] for i in range(16)]
        enc = tok([c + " </s>" for c in chunk], padding=True, return_tensors="pt")
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        loss = model(**enc, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"base pretrained: loss {float(loss):.3f} after 400 steps")
    model.save_pretrained(folder)


def classifier_config(folder: Path) -> None:
    """A tiny BERT config whose id2label names the topics (random init at build time)."""
    from transformers import AutoTokenizer, BertConfig

    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    names = sorted(TOPICS)
    BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        pad_token_id=tok.pad_token_id,
        id2label=dict(enumerate(names)),
        label2id={n: i for i, n in enumerate(names)},
    ).save_pretrained(folder)


def main() -> None:
    write_jsonl(LORA / "data", lora_data())
    word_tokenizer(lora_words(), LORA / "base", bos=True, cls=False)
    lora_base(LORA / "base")
    write_jsonl(CLASSIFIER / "data", classifier_data())
    word_tokenizer(classifier_words(), CLASSIFIER / "model", bos=False, cls=True)
    classifier_config(CLASSIFIER / "model")
    print(f"wrote {LORA} and {CLASSIFIER}")


if __name__ == "__main__":
    main()
