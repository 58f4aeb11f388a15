"""Broken twins of the shelf's families for the silent-error classes of batch invariants (issue 35)."""

from __future__ import annotations

from tests.shelf.campaigns import Case

CASES: dict[str, Case] = {
    "diffusion_timesteps_scaled": Case(
        "diffusers_unet_timesteps_scaled.py:task",
        training={"lr": 1e-3},
        family="diffusion",
        expect="passed",
        gate="data",
        check="every input field read",
        verdict="warn",
        words=("timestep", "scale it cannot resolve"),
    ),
    "bert_mask_ignored": Case(
        "hf_bert_mask_ignored.py:task",
        {"max_length": 16, "hidden": 32, "train_examples": 256, "val_examples": 48},
        training={"lr": 1e-3},
        family="bert",
        expect="failed",
        gate="data",
        check="every input field read",
        words=("attention_mask", "never arrives"),
    ),
    "regression_batch_standardised": Case(
        "regression_batch_standardised.py:task",
        training={"lr": 1e-3},
        family="regression",
        expect="failed",
        gate="data",
        check="examples independent",
        words=("mixes the examples", "net.0"),
    ),
    "lstm_time_major": Case(
        "lstm_time_major.py:task",
        training={"lr": 1e-3},
        family="lstm",
        expect="failed",
        gate="data",
        check="examples independent",
        words=("mixes the examples", "'rnn' (LSTM)"),
    ),
    "regression_target_in_features": Case(
        "regression_target_in_features.py:task",
        training={"lr": 1e-3},
        family="regression",
        expect="failed",
        gate="data",
        check="targets hidden from the model",
        words=("column 5 of 'features'", "the model reads it"),
    ),
    "dpo_bert_style_mask": Case(
        "dpo_bert_style_mask.py:task",
        training={"lr": 1e-3},
        family="dpo",
        expect="failed",
        gate="data",
        check="targets hidden from the model",
        words=("reads it", "causal mask"),
    ),
    "bert_mask_inverted": Case(
        "hf_bert_mask_inverted.py:task",
        {"max_length": 16, "hidden": 32, "train_examples": 256, "val_examples": 48},
        training={"lr": 1e-3},
        family="bert",
        expect="failed",
        gate="data",
        check="padding invisible to the text",
        words=("more padded positions", "not inverted"),
    ),
    "bert_mean_pooled": Case(
        "hf_bert_mean_pooled.py:task",
        {"max_length": 16, "hidden": 32, "train_examples": 256, "val_examples": 48},
        training={"lr": 1e-3},
        family="bert",
        expect="failed",
        gate="data",
        check="padding invisible to the text",
        words=("more padded positions", "pooling over the sequence"),
    ),
}
