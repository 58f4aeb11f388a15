"""Broken twin of the LSTM task: the ``nn.LSTM`` is built without ``batch_first=True`` while it is fed (batch,
time) tensors, so it reads the batch dimension as time: example i's state flows into example i+1, and each
"sequence" is one position across the batch. Shapes all fit, nothing fails, the loss falls. The data gate
must measure that the examples mix, and name the module where."""

from __future__ import annotations

from torch import nn

from cockpit.pilot.task import Task
from tests.shelf import lstm_task as base


class TimeMajor(base.RNNModel):
    def __init__(self, vocab: int) -> None:
        super().__init__(vocab)
        self.rnn = nn.LSTM(32, 48, 2)  # batch_first left at its default, False


task = Task(
    build_model=lambda params: TimeMajor(base.VOCAB),
    datasets=base.datasets,
    collate=base.collate,
    loss=base.loss,
    kind="generation",
    label_convention="aligned",
    vocab_size=lambda params: base.VOCAB,
    group_unit="document",
)
