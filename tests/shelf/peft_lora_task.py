"""A LoRA adapter (PEFT) on a tiny Llama (random init), through ``hf.causal_lm``: only the adapter trains."""

from __future__ import annotations

from typing import Any

from peft import LoraConfig
from transformers import LlamaConfig, LlamaForCausalLM

from cockpit.integrations import hf
from tests.shelf.synthetic import EOS, PAD, VOCAB, char_tokenizer, text_pairs


def base_model(params: dict[str, Any]) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=EOS,
        eos_token_id=EOS,
    )
    return LlamaForCausalLM(config)


ADAPTER = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")


def make(model: Any = base_model) -> Any:
    return hf.causal_lm(
        model=model, tokenizer=char_tokenizer, data=text_pairs, adapter=ADAPTER, max_length=32, group_unit="word"
    )


task = make()
