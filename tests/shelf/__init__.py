"""Real third-party model code the pilot's gates are calibrated on (the shelf).

Each task file is written the way a user of that library writes it, not the
way Cockpit's built-in tasks are: a nanoGPT-style GPT (targets pre-shifted,
ignore index -1, the loss returned by the model, its own optimizer with
parameter groups), Hugging Face GPT-2 and BERT (the loss comes out of the
model or is computed from its logits, labels shifted inside the model), and
a ResNet-18-shaped convnet with BatchNorm (transformers' own ResNet; PyPI's torchvision
cannot load beside a CPU torch, and no test repairs a third-party package). Models are tiny random-init configs;
nothing is downloaded. Each healthy task has a broken twin that must fail at a
named gate.
"""
