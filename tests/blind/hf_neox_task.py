"""A GPT-NeoX causal LM (tiny, random init from a GPTNeoXConfig: rotary embeddings, parallel residual) through
``cockpit.integrations.hf.causal_lm``, the prompt masked; a transformers fast tokenizer over characters."""

from __future__ import annotations

from transformers import GPTNeoXConfig

from cockpit.integrations import hf
from tests.shelf.synthetic import EOS, PAD, VOCAB, char_tokenizer, text_pairs

task = hf.causal_lm(
    model=GPTNeoXConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        rotary_pct=0.5,
        max_position_embeddings=64,
        use_parallel_residual=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=EOS,
    ),
    tokenizer=char_tokenizer(),
    data=text_pairs,
    max_length=32,
    group_unit="word",
)
