"""A Mamba causal LM (tiny, random init from a MambaConfig: a selective state-space model, no attention) through
``cockpit.integrations.hf.causal_lm``, the prompt masked; a transformers fast tokenizer over characters."""

from __future__ import annotations

from transformers import MambaConfig

from cockpit.integrations import hf
from tests.shelf.synthetic import EOS, PAD, VOCAB, char_tokenizer, text_pairs

task = hf.causal_lm(
    model=MambaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        state_size=8,
        num_hidden_layers=2,
        expand=2,
        conv_kernel=4,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=EOS,
        use_cache=False,
    ),
    tokenizer=char_tokenizer(),
    data=text_pairs,
    max_length=32,
    group_unit="word",
)
