"""A task whose loss raises: the forward gate must fail with the user's traceback in output.log."""

from cockpit.pilot.task import Task
from cockpit.tasks import tinylm


def broken_loss(model, batch):
    logits = model(batch["input_ids"], batch["attention_mask"])
    raise ValueError(f"boom: cannot score logits of shape {tuple(logits.shape)}")


task = Task(
    build_model=tinylm.build_model,
    datasets=tinylm.datasets,
    collate=tinylm.collate,
    loss=broken_loss,
    kind="generation",
    length=tinylm.length,
)
