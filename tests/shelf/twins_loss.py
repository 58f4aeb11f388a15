"""Broken twins of the shelf's families for the silent-error classes of loss invariants (issue 35): the loss at
initialisation against what its objective implies (1), a loss unbounded below or at the floor of a double
softmax once the overfit runs on past its threshold (2), each loss term on its own (3)."""

from __future__ import annotations

from tests.shelf.campaigns import Case

NANOGPT = {"block_size": 64, "n_layer": 2, "n_head": 2, "n_embd": 64}
RESNET = {"image_size": 32, "train_examples": 128, "val_examples": 32}
RESNET_BATCH = {"microbatch": 8, "accumulation": 1, "eval_microbatch": 16}

CASES: dict[str, Case] = {
    # 1. the loss at initialisation
    "nanogpt_logits_x100": Case(
        "nanogpt_logits_x100.py:task",
        NANOGPT,
        training={"lr": 1e-3, "weight_decay": 0.1, "grad_clip": 1.0},
        family="nanogpt",
        expect="passed",
        gate="forward",
        check="initial loss as the objective implies",
        verdict="warn",
        words=("far above uniform", "nats", "logits at a wrong scale"),
    ),
    "resnet_loss_summed": Case(
        "resnet_loss_summed.py:task",
        RESNET,
        batch=RESNET_BATCH,
        training={"lr": 1e-3},
        family="resnet",
        expect="passed",
        gate="forward",
        check="initial loss as the objective implies",
        verdict="warn",
        words=("a sum where a mean was meant", "8 x the mean cross-entropy"),
    ),
    # 2. bounded below, and the floor where it settles
    "nanogpt_double_softmax": Case(
        "nanogpt_double_softmax.py:task",
        NANOGPT,
        training={"lr": 1e-3, "weight_decay": 0.1, "grad_clip": 1.0},
        pilot={"overfit_examples": 8},
        family="nanogpt",
        expect="failed",
        gate="overfit",
        check="settled loss above its floor",
        words=("double softmax", "ln(e + "),
    ),
    "resnet_double_softmax": Case(
        "resnet_double_softmax.py:task",
        RESNET,
        batch=RESNET_BATCH,
        training={"lr": 1e-3},
        family="resnet",
        expect="failed",
        gate="overfit",
        check="settled loss above its floor",
        words=("double softmax", "ln(e + "),
    ),
    "regression_nll_flipped": Case(
        "regression_nll_flipped.py:task",
        training={"lr": 1e-3},
        family="regression",
        expect="failed",
        gate="overfit",
        check="loss bounded below",
        words=("unbounded below", "wrong sign"),
    ),
    # 3. each loss term on its own
    "mixtral_aux_dominant": Case(
        "hf_mixtral_aux_dominant.py:task",
        training={"lr": 1e-3},
        family="mixtral",
        expect="passed",
        gate="forward",
        check="loss terms at init",
        verdict="warn",
        words=("aux_loss", "drowns"),
    ),
    "regression_penalty_detached": Case(
        "regression_penalty_detached.py:task",
        training={"lr": 1e-3},
        family="regression",
        expect="passed",
        gate="overfit",
        check="each loss term falls",
        verdict="warn",
        words=("penalty", "did not fall"),
    ),
}
