"""The end of each text is a target: measured on collated batches laid out as real collators lay them out."""

from __future__ import annotations

import torch

from cockpit.pilot.phases.ending import judge

IGN = -100
EOS, PAD = 1, 0


def _batch(texts: list[list[int]], prompt: int, pad: int, mask_by_id: bool, shift_in_collate: bool = False) -> dict:
    """Right-padded rows of ``texts``; labels -100 on the first ``prompt`` tokens and the padding (by the attention
    mask, or by the pad id as transformers' DataCollatorForLanguageModeling does)."""
    seqs = [t[:-1] for t in texts] if shift_in_collate else texts
    width = max(len(t) for t in seqs)
    ids = torch.full((len(seqs), width), pad)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    lab = torch.full((len(seqs), width), IGN)
    for i, t in enumerate(seqs):
        ids[i, : len(t)] = torch.tensor(t)
        mask[i, : len(t)] = 1
        target = texts[i][1:] if shift_in_collate else t
        lab[i, : len(t)] = torch.tensor(target)
        lab[i, : prompt - (1 if shift_in_collate else 0)] = IGN
    if mask_by_id:
        lab[ids == pad] = IGN
    return {"input_ids": ids, "attention_mask": mask, "labels": lab}


TEXTS = [[5, 6, 7, 8, 9, 10, EOS], [5, 6, 11, 12, EOS], [5, 7, 13, 14, 15, EOS], [5, 9, 16, EOS]]


def _judge(batch: dict) -> tuple[str, str]:
    return judge(batch, "input_ids", "labels", "attention_mask", None, IGN)


def test_an_end_token_masked_with_the_padding_fails_and_names_the_pad_token() -> None:
    verdict, words = _judge(_batch(TEXTS, 2, pad=EOS, mask_by_id=True))
    assert verdict == "fail", words
    assert "token 1 closes 4 of the 4 texts" in words and "tokenizer.pad_token = tokenizer.eos_token" in words


def test_the_same_texts_padded_with_another_id_pass() -> None:
    verdict, words = _judge(_batch(TEXTS, 2, pad=PAD, mask_by_id=True))
    assert verdict == "pass" and "the last token of each is a target" in words, words
    verdict, words = _judge(_batch(TEXTS, 2, pad=EOS, mask_by_id=False))  # pad = eos, masked by the attention mask
    assert verdict == "pass", words


def _next_token_batch(texts: list[list[int]], pad: int, mask_by_id: bool) -> dict:
    """The whole texts as inputs, labels[t] = input[t + 1] (shifted in the collate), the last position without a
    target; the padding's labels set to -100 by the attention mask or by the pad id."""
    width = max(len(t) for t in texts)
    ids = torch.full((len(texts), width), pad)
    mask = torch.zeros((len(texts), width), dtype=torch.long)
    for i, t in enumerate(texts):
        ids[i, : len(t)] = torch.tensor(t)
        mask[i, : len(t)] = 1
    lab = torch.full_like(ids, IGN)
    lab[:, :-1] = ids[:, 1:]
    lab[:, :-1][mask[:, 1:] == 0] = IGN
    if mask_by_id:
        lab[lab == pad] = IGN
    return {"input_ids": ids, "attention_mask": mask, "labels": lab}


def test_labels_shifted_in_the_collate_are_read_the_same_way() -> None:
    healthy = _batch(TEXTS, 2, pad=PAD, mask_by_id=False, shift_in_collate=True)  # x = text[:-1], y = text[1:]
    assert _judge(healthy)[0] == "pass", _judge(healthy)
    for pad in (PAD, EOS):  # x = text, y[t] = x[t + 1]: the last position has no target, by construction
        assert _judge(_next_token_batch(TEXTS, pad, mask_by_id=False))[0] == "pass"
    # chunks of running text without an end token: no end to learn, and none claimed
    chunks = [[5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16], [17, 18]]
    verdict, words = _judge(_next_token_batch(chunks, PAD, mask_by_id=False))
    assert verdict == "pass" and "not seen" in words, words
    verdict, words = _judge(_next_token_batch(TEXTS, EOS, mask_by_id=True))  # pad = eos, labels masked by the id
    assert verdict == "fail" and "token 1 closes 4 of the 4" in words, words
    assert "tokenizer.pad_token = tokenizer.eos_token" in words, words


def test_a_template_whose_targets_end_with_an_end_marker_before_trailing_tokens_passes() -> None:
    im_end, newline = 2, 3
    texts = [t[:-1] + [im_end, newline] for t in TEXTS]
    b = _batch(texts, 2, pad=PAD, mask_by_id=True)
    last = b["attention_mask"].sum(1) - 1
    b["labels"][torch.arange(4), last] = IGN  # the template's "\n" after <|im_end|> is not trained, as meant
    verdict, words = _judge(b)
    assert verdict == "pass" and "end with token 2" in words, words


def test_one_text_of_many_missing_its_end_warns() -> None:
    texts = TEXTS * 2
    b = _batch(texts, 2, pad=PAD, mask_by_id=False)
    last = int(b["attention_mask"][0].sum()) - 1
    b["labels"][0, last] = IGN
    verdict, words = _judge(b)
    assert verdict == "warn" and "in 1 of them" in words, words


def test_texts_cut_to_the_length_still_have_their_last_token_scored() -> None:
    b = _batch([[5 + i + j for j in range(8)] for i in range(4)], 2, pad=PAD, mask_by_id=False)
    verdict, words = _judge(b)
    assert verdict == "pass" and words.startswith("the 4 texts with targets"), words


def test_another_target_stream_or_no_mask_is_not_applicable() -> None:
    b = _batch(TEXTS, 0, pad=PAD, mask_by_id=False)
    every_third = torch.arange(b["labels"].numel()).reshape(b["labels"].shape) % 3 == 0
    mlm = dict(b, labels=torch.where(every_third, 99, IGN))  # masked-LM style: targets at masked positions only
    assert _judge(mlm)[0] == "na" and "another target stream" in _judge(mlm)[1]
    nomask = {k: v for k, v in b.items() if k != "attention_mask"}
    assert _judge(nomask)[0] == "na" and "where each text ends is not known" in _judge(nomask)[1]
    tagged = dict(b, labels=torch.ones(4))  # real-valued targets
    assert _judge(tagged)[0] == "na"
