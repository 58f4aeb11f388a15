"""Broken twin of the LoRA task: the adapter a previous run saved is loaded with ``PeftModel.from_pretrained``,
whose default is ``is_trainable=False`` (loaded for inference), so nothing trains at all."""

from __future__ import annotations

import copy
import tempfile
from typing import Any

from peft import PeftModel, get_peft_model

from cockpit.integrations import hf
from tests.shelf import peft_lora_task as base
from tests.shelf.synthetic import char_tokenizer, text_pairs


def build(params: dict[str, Any]) -> Any:
    with tempfile.TemporaryDirectory() as folder:
        get_peft_model(base.base_model(params), copy.deepcopy(base.ADAPTER)).save_pretrained(folder)
        return PeftModel.from_pretrained(base.base_model(params), folder)  # is_trainable=False by default


task = hf.causal_lm(model=build, tokenizer=char_tokenizer, data=text_pairs, max_length=32, group_unit="word")
