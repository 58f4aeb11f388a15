"""Broken twins of the shelf's families for the silent-error classes of update invariants (issue 35).

Class 10 (what an optimizer step must keep true): a scheduler stepped once per microbatch besides once per update
(nanoGPT, ResNet), a schedule whose horizon is half the run (GPT-2), weight decay on every tensor, LayerNorm gains
and biases included (GPT-2, ViT), a learnable temperature beside the model that clipping never reaches (nanoGPT,
ResNet), a PEFT ``modules_to_save`` copy frozen by a name filter (LoRA). Class 11 (data randomness): an
augmentation that re-seeds NumPy's generator per example (ResNet) or torch's per batch (regression).
"""

from __future__ import annotations

from tests.shelf.campaigns import Case

NANOGPT = {"block_size": 64, "n_layer": 2, "n_head": 2, "n_embd": 64}
NANOGPT_TRAINING = {"lr": 1e-3, "weight_decay": 0.1, "grad_clip": 1.0}
GPT2 = {"max_length": 32, "n_layer": 2, "n_head": 2, "n_embd": 64, "train_examples": 256, "val_examples": 32}
RESNET = {"image_size": 32, "train_examples": 128, "val_examples": 32}
RESNET_BATCH = {"microbatch": 8, "accumulation": 1, "eval_microbatch": 16}

CASES: dict[str, Case] = {
    "nanogpt_sched_per_microbatch": Case(
        "nanogpt_sched_per_microbatch.py:task",
        NANOGPT,
        training=NANOGPT_TRAINING,
        family="nanogpt",
        expect="failed",
        gate="update_second",
        check="schedule steps once per update",
        words=("advanced 15 times in 5 updates", "once per microbatch", "3x faster"),
    ),
    "resnet_sched_per_microbatch": Case(
        "resnet_sched_per_microbatch.py:task",
        RESNET,
        batch=RESNET_BATCH,
        training={"lr": 1e-3},
        family="resnet",
        expect="failed",
        gate="update_second",
        check="schedule steps once per update",
        words=("advanced 10 times in 5 updates", "once per microbatch"),
    ),
    "gpt2_schedule_halved": Case(
        "gpt2_schedule_halved.py:task",
        GPT2,
        training={"lr": 1e-3},
        family="gpt2",
        expect="failed",
        gate="update_second",
        check="schedule spans the run",
        words=("to 0 at update 100 of the run's 200", "the accumulation of 2"),
    ),
    "gpt2_decay_everywhere": Case(
        "hf_gpt2_decay_everywhere.py:task",
        GPT2,
        training={"lr": 1e-3},
        family="gpt2",
        expect="passed",
        gate="update_first",
        check="weight decay spares biases and norms",
        verdict="warn",
        words=("normalisation weights", "biases", "weight_decay 0"),
    ),
    "vit_decay_everywhere": Case(
        "hf_vit_decay_everywhere.py:task",
        training={"lr": 1e-3},
        family="vit",
        expect="passed",
        gate="update_first",
        check="weight decay spares biases and norms",
        verdict="warn",
        words=("normalisation weights", "biases"),
    ),
    "nanogpt_temperature_outside": Case(
        "nanogpt_temperature_outside.py:task",
        NANOGPT,
        training=NANOGPT_TRAINING,
        family="nanogpt",
        expect="failed",
        gate="update_second",
        check="gradient clipping acts",
        words=("grad_clip = 1", "not a parameter of the model"),
    ),
    "resnet_temperature_outside": Case(
        "resnet_temperature_outside.py:task",
        RESNET,
        batch=RESNET_BATCH,
        training={"lr": 1e-3, "grad_clip": 1.0},
        family="resnet",
        expect="failed",
        gate="update_second",
        check="gradient clipping acts",
        words=("grad_clip = 1", "not a parameter of the model"),
    ),
    "lora_head_filtered": Case(
        "peft_lora_head_filtered.py:task",
        training={"lr": 1e-3},
        pilot={"overfit_lr": 1e-2},
        family="lora",
        expect="failed",
        gate="update_first",
        check="trainable as the adapter's config says",
        words=("modules_to_save", "lm_head", "not require grad", "3.3%"),
    ),
    "resnet_flip_reseeded": Case(
        "resnet_flip_reseeded.py:task",
        RESNET,
        batch=RESNET_BATCH,
        training={"lr": 1e-3},
        family="resnet",
        expect="failed",
        gate="update_second",
        check="augmentations differ across epochs",
        words=("re-seeds NumPy's", "every epoch"),
    ),
    "regression_noise_reseeded": Case(
        "regression_noise_reseeded.py:task",
        training={"lr": 1e-3},
        family="regression",
        expect="failed",
        gate="update_second",
        check="augmentations differ across epochs",
        words=("re-seeds torch's", "every epoch"),
    ),
}
