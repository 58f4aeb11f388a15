"""A speech encoder-decoder: Hugging Face Whisper (tiny, random init) on random log-mel features.

``input_features`` are (batch, mel bins, frames) floats, as Whisper's feature extractor gives them; the labels
are a short transcript (characters), padded with -100, on the decoder side.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

from cockpit.pilot.task import Task
from tests.shelf.synthetic import EOS, PAD, VOCAB, encode, generator, pad, split

MELS, SOURCE = 8, 16  # Whisper needs 2 * max_source_positions frames
WORDS = ("yes", "no", "up", "down", "left", "right", "stop", "go")


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    def make(i: int) -> dict[str, Any]:
        word = WORDS[i % len(WORDS)]
        g = generator(i, 7)
        # a word's own spectral pattern, plus noise: the transcript is learnable from the features
        base = torch.randn(MELS, 2 * SOURCE, generator=generator(WORDS.index(word), 8))
        return {"features": (base + 0.3 * torch.randn(MELS, 2 * SOURCE, generator=g)).tolist(), "text": word}

    return split(int(params.get("train_examples", 48)), int(params.get("val_examples", 16)), make)


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    feats = torch.tensor([e["features"] for e in examples], dtype=torch.float32)
    labels = pad([encode(e["text"]) + [EOS] for e in examples], -100)
    return {"input_features": feats, "labels": labels}


def build_model(params: dict[str, Any]) -> WhisperForConditionalGeneration:
    config = WhisperConfig(
        vocab_size=VOCAB,
        num_mel_bins=MELS,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        d_model=16,
        max_source_positions=SOURCE,
        max_target_positions=16,
        pad_token_id=PAD,
        bos_token_id=EOS,
        eos_token_id=EOS,
        decoder_start_token_id=EOS,
        dropout=0.0,
        suppress_tokens=[],
        begin_suppress_tokens=[],
    )
    return WhisperForConditionalGeneration(config)


task = Task(
    build_model=build_model,
    datasets=datasets,
    collate=collate,
    kind="generation",
    input_key="input_features",
    vocab_size=lambda params: VOCAB,
    group_unit="recording",
)
