"""Bring existing training code under Cockpit in a few lines.

- :mod:`cockpit.integrations.hf`: Hugging Face transformers models (a causal LM fine-tuned on
  prompt/answer fields with the prompt masked, a sequence classifier with its config's label
  names), PEFT adapters, ``datasets`` splits or lists of dicts, the model's own loss;
- :mod:`cockpit.integrations.lightning`: a ``LightningModule`` and a ``LightningDataModule``;
- :mod:`cockpit.integrations.training_args`: the settings of a ``TrainingArguments`` JSON file as
  the campaign's ``[batch]`` and ``[training]`` (``cockpit new NAME --from-training-args FILE``).

Each builds a plain :class:`cockpit.pilot.task.Task`: nothing is hidden from the gates, and the
third-party library is imported only when a helper is called (``import cockpit`` never imports
transformers, PEFT or Lightning). Nothing is downloaded: models and tokenizers come from local
folders, configs or functions.
"""
