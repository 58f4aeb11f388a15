"""The phases a probe measures, in the order a training script goes through them, and their remedies. No torch.

The names are the pilot's, so every reader (the gate table, ``compare``, the sheet, the plan) reads a
probe's rows as it reads a pilot's. A probe has no data, leakage, accumulation, worst-case, overfit or
export phase: those need the task's data and model in Cockpit's hands.
"""

from __future__ import annotations

STACK = "stack"
FORWARD = "forward"
BACKWARD = "backward"
UPDATE_FIRST = "update_first"
UPDATE_SECOND = "update_second"
VALIDATION = "validation"
SAVE = "save"
RESUME = "resume"

TRAINING = (STACK, FORWARD, BACKWARD, UPDATE_FIRST, UPDATE_SECOND, VALIDATION, SAVE)


def planned(resume: bool) -> list[str]:
    """The rows a probe plans: the training phases, and resume when a resume command is given."""
    return [*TRAINING, *([RESUME] if resume else [])]


REMEDY = {
    STACK: "run the script with an interpreter that has torch and Cockpit installed (the venv's python)",
    FORWARD: "inspect the batch the script feeds its model and the loss it computes (shapes, dtype, reduction)",
    BACKWARD: "check the graph (detached tensors, frozen parameters), precision and the loss's normalisation",
    UPDATE_FIRST: "inspect the optimizer: which parameters it holds, their requires_grad, the learning rate",
    UPDATE_SECOND: "inspect the optimizer and the learning rate: the loss must stay finite over the later steps",
    VALIDATION: "evaluate under model.eval() and torch.no_grad(), and call model.train() before training again",
    SAVE: "save what resuming needs (model, optimizer, scheduler, step, RNG) with torch.save of tensors only",
    RESUME: "save and restore everything that changes during training: optimizer, scheduler, step, data position, RNG",
}
