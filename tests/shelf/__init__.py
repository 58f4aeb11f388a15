"""Real third-party model code the pilot's gates are calibrated on (the shelf).

Each task file is written the way a user of that library writes it, not the
way Cockpit's built-in tasks are: a nanoGPT-style GPT (targets pre-shifted,
ignore index -1, the loss returned by the model, its own optimizer with
parameter groups), Hugging Face GPT-2 and BERT (the loss comes out of the
model or is computed from its logits, labels shifted inside the model), and
torchvision's ResNet-18 (BatchNorm). Models are tiny random-init configs;
nothing is downloaded. Each healthy task has a broken twin that must fail at a
named gate.
"""

from tests.shelf.vision import make_torchvision_importable

make_torchvision_importable()  # before transformers, which imports torchvision when it is installed
