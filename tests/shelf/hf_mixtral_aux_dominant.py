"""Broken twin of the Mixtral task: the router's load-balancing coefficient set to 100 where Mixtral's own default
is 0.02 (a factor typed in the wrong unit), so the balancing term holds almost all of the loss and its gradient
drowns the language model's. The forward gate reads the model's ``aux_loss`` beside the total and must name it."""

from __future__ import annotations

import copy

from cockpit.integrations import hf
from tests.shelf import hf_mixtral_task as base
from tests.shelf.synthetic import char_tokenizer, text_pairs

CONFIG = copy.deepcopy(base.CONFIG)
CONFIG.router_aux_loss_coef = 100.0  # the mistake

task = hf.causal_lm(model=CONFIG, tokenizer=char_tokenizer, data=text_pairs, max_length=32, group_unit="word")
