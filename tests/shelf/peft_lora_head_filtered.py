"""Broken twin of the LoRA task (TrainCheck's pytorch-forum-84911, in PEFT's terms): the adapter config saves the
``lm_head`` as a trained copy (``modules_to_save``), and the user then freezes every parameter whose name lacks
``lora_``, so the head's copy never trains although the config says it does."""

from __future__ import annotations

import copy
from typing import Any

from peft import get_peft_model

from cockpit.integrations import hf
from tests.shelf import peft_lora_task as base
from tests.shelf.synthetic import char_tokenizer, text_pairs


def build(params: dict[str, Any]) -> Any:
    config = copy.deepcopy(base.ADAPTER)
    config.modules_to_save = ["lm_head"]
    model = get_peft_model(base.base_model(params), config)
    for name, p in model.named_parameters():
        p.requires_grad = "lora_" in name  # "train only the adapter"
    return model


task = hf.causal_lm(model=build, tokenizer=char_tokenizer, data=text_pairs, max_length=32, group_unit="word")
