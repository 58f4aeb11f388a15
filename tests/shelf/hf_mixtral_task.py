"""A mixture-of-experts LM through Cockpit's own helper: Hugging Face Mixtral (tiny, random init) with its router's
load-balancing loss (``output_router_logits=True``, the loss the model returns adds ``router_aux_loss_coef`` times
the balancing term), fine-tuned on prompt -> answer with the prompt masked, via ``hf.causal_lm``.
"""

from __future__ import annotations

from typing import Any

from transformers import MixtralConfig

from cockpit.integrations import hf
from tests.shelf.synthetic import EOS, PAD, VOCAB, char_tokenizer, text_pairs

CONFIG = MixtralConfig(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    num_local_experts=4,
    num_experts_per_tok=2,
    max_position_embeddings=64,
    output_router_logits=True,
    router_aux_loss_coef=0.02,
    pad_token_id=PAD,
    bos_token_id=EOS,
    eos_token_id=EOS,
    tie_word_embeddings=False,
)


def make(collator: Any = None) -> Any:
    return hf.causal_lm(
        model=CONFIG,
        tokenizer=char_tokenizer,
        data=text_pairs,
        max_length=32,
        collator=collator,
        group_unit="word",
    )


task = make()
