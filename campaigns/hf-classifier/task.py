"""A Hugging Face sequence classifier (BERT-style, from its local config) sorting sentences by topic."""

from cockpit.integrations import hf

task = hf.sequence_classification(
    model="model/config.json",  # the architecture only (random init); a folder with weights would load them
    tokenizer="model",
    data={"train": "data/train.jsonl", "validation": "data/val.jsonl", "test": "data/test.jsonl"},
    text="text",
    label="label",  # topic names; the label names come from the config's id2label
    max_length=16,
)
