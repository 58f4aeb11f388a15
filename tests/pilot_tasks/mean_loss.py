"""tinylm with a token mean per microbatch: wrong under accumulation with unequal lengths."""

import torch.nn.functional as F

from cockpit.pilot.task import Task
from cockpit.tasks import tinylm


def mean_loss(model, batch):
    logits = model(batch["input_ids"], batch["attention_mask"])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1), ignore_index=-100)


task = Task(
    build_model=tinylm.build_model,
    datasets=tinylm.datasets,
    collate=tinylm.collate,
    loss=mean_loss,
    kind="generation",
    length=tinylm.length,
    predict=tinylm.predict,
    control_inputs=tinylm.control_inputs,
)
