"""A mixture-of-experts LM (Hugging Face Mixtral, tiny, random init) through ``hf.causal_lm``, router loss on.

With ``output_router_logits=True`` the model's ``.loss`` is the cross-entropy plus ``router_aux_loss_coef`` x
the router's load-balancing loss, which is computed over the tokens of the whole batch: the loss does not
decompose over examples, so an accumulated update optimises a (slightly) different objective than one batch.
"""

from __future__ import annotations

from typing import Any

from cockpit.integrations import hf
from tests.verdict_tasks.words import copy_pairs, tokenizer


def config(params: dict[str, Any]) -> Any:
    from transformers import MixtralConfig

    return MixtralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
        output_router_logits=True,
        router_aux_loss_coef=float(params.get("router_aux_loss_coef", 0.02)),
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )


def build(params: dict[str, Any]) -> Any:
    from transformers import MixtralForCausalLM

    return MixtralForCausalLM(config(params))


task = hf.causal_lm(
    model=build,
    tokenizer=tokenizer,
    data=lambda params: copy_pairs(),
    max_length=16,
)
