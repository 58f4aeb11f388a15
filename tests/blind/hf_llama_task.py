"""A Llama causal LM (tiny, random init from a LlamaConfig) through ``cockpit.integrations.hf.causal_lm``: the
prompt masked, the answer learned; the tokenizer a transformers fast tokenizer over characters."""

from __future__ import annotations

from transformers import LlamaConfig

from cockpit.integrations import hf
from tests.shelf.synthetic import EOS, PAD, VOCAB, char_tokenizer, text_pairs

config = LlamaConfig(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    pad_token_id=PAD,
    eos_token_id=EOS,
    bos_token_id=EOS,
    tie_word_embeddings=False,
)

task = hf.causal_lm(
    model=config,
    tokenizer=char_tokenizer(),
    data=lambda p: text_pairs(p),
    prompt="prompt",
    answer="answer",
    max_length=32,
    group_unit="word",
)
