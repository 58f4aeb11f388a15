"""Broken twins of the shelf's families for the silent-error classes of state invariants (issue 35)."""

from __future__ import annotations

from tests.shelf.campaigns import Case

RESNET = {"image_size": 32, "train_examples": 128, "val_examples": 32}
GPT2 = {"max_length": 32, "n_layer": 2, "n_head": 2, "n_embd": 64, "train_examples": 256, "val_examples": 32}

CASES: dict[str, Case] = {
    # class 7: a frozen module left in training mode while it feeds the loss
    "distill_teacher_train": Case(
        "distill_teacher_train.py:task",
        training={"lr": 1e-3},
        family="distill",
        expect="failed",
        gate="forward",
        check="frozen modules in eval mode",
        words=("teacher", "random", "target", ".eval()"),
    ),
    "dpo_reference_train": Case(
        "dpo_reference_train.py:task",
        training={"lr": 1e-3},
        family="dpo",
        expect="failed",
        gate="forward",
        check="frozen modules in eval mode",
        words=("reference", "random", "target", ".eval()"),
    ),
    "resnet_frozen_backbone": Case(
        "resnet_frozen_backbone.py:task",
        RESNET,
        batch={"microbatch": 8, "accumulation": 1, "eval_microbatch": 16},
        training={"lr": 1e-3},
        family="resnet",
        expect="passed",
        gate="forward",
        check="frozen modules in eval mode",
        verdict="warn",
        words=("resnet", "running_", ".eval()"),
    ),
    # the pretrained weights overwritten in build_model by an initialisation run after the load
    "resnet_init_after_load": Case(
        "resnet_init_after_load.py:task",
        RESNET,
        batch={"microbatch": 8, "accumulation": 1, "eval_microbatch": 16},
        training={"lr": 1e-3},
        family="resnet",
        expect="failed",
        gate="forward",
        check="weights loaded where they belong",
        words=(
            "resnet_init_after_load.py:34",
            "resnet_init_after_load.py:26 in init_weights wrote over them",
            "believed pretrained",
        ),
    ),
    # bf16 weights stepped in place at a fine-tuning rate: most updates round back to the same weight
    "gpt2_bf16_weights": Case(
        "hf_gpt2_bf16_weights.py:task",
        {"max_length": 32, "n_layer": 2, "n_head": 2, "n_embd": 64, "train_examples": 256, "val_examples": 32},
        training={"lr": 2e-5},
        family="gpt2",
        expect="failed",
        gate="update_first",
        check="updates survive the weights' rounding",
        words=("stored in bfloat16", "rounds back to the same weight", "hf_gpt2_bf16_weights.py:17 (build_model)"),
    ),
    # a fixed seed in build_model: every seed of the campaign trains the same run
    "gpt2_seed_fixed": Case(
        "hf_gpt2_seed_fixed.py:task",
        GPT2,
        training={"lr": 1e-3},
        family="gpt2",
        expect="failed",
        gate="forward",
        check="the run's seed reaches the model",
        words=("seeded with 42", "hf_gpt2_seed_fixed.py:18 in build_model", "the same in every seed"),
    ),
    # class 8: a tensor kept from each step, attached to its graph, so memory grows with the steps
    "regression_loss_history": Case(
        "regression_loss_history.py:task",
        training={"lr": 1e-3},
        family="regression",
        expect="failed",
        gate="update_second",
        check="no state kept attached across updates",
        words=("TrackedLoss (Task.loss).history", "graph", "loss.item()"),
    ),
    "gpt2_running_loss": Case(
        "hf_gpt2_running_loss.py:task",
        GPT2,
        training={"lr": 1e-3},
        family="gpt2",
        expect="failed",
        gate="update_second",
        check="no state kept attached across updates",
        words=("GPT2LMHeadModel.loss_total", "graph nodes", "loss.item()"),
    ),
    # class 9: float inputs out of the range the model expects (warnings: an unusual range is not proof)
    "vit_raw_pixels": Case(
        "hf_vit_raw_pixels.py:task",
        training={"lr": 1e-3},
        family="vit",
        expect="passed",
        gate="data",
        check="float inputs in range",
        verdict="warn",
        words=("pixel_values", "never normalised", "255"),
    ),
    "resnet_normalised_twice": Case(
        "resnet_normalised_twice.py:task",
        RESNET,
        batch={"microbatch": 8, "accumulation": 1, "eval_microbatch": 16},
        training={"lr": 1e-3},
        family="resnet",
        expect="passed",
        gate="data",
        check="float inputs in range",
        verdict="warn",
        words=("pixel_values", "normalised twice"),
    ),
    "wav2vec2_int16": Case(
        "hf_wav2vec2_int16.py:task",
        training={"lr": 1e-3},
        pilot={"overfit_lr": 1e-2, "overfit_steps": 600},
        family="wav2vec2_ctc",
        expect="passed",
        gate="data",
        check="float inputs in range",
        verdict="warn",
        words=("input_values", "16-bit"),
    ),
    "nanogpt_blocks_in_list": Case(
        "nanogpt_blocks_in_list.py:task",
        {"block_size": 64, "n_layer": 2, "n_head": 2, "n_embd": 64},
        training={"lr": 1e-3, "weight_decay": 0.1, "grad_clip": 1.0},
        family="nanogpt",
        expect="failed",
        gate="backward",
        check="every trained tensor is registered",
        words=("blocks[0].attn", "never updates them", "nn.ModuleList"),
    ),
}
