"""The batch dimension the probe records is read from the call, not assumed to be dim 0 (issue 26: a time-major: the
tests that start processes or load models (the rest: tests/gates/test_probe_shapes.py)."""

from __future__ import annotations

import pytest
import torch

from tests.gates.test_probe import probe  # noqa: F401 - the fixture
from tests.gates.test_probe_shapes import TimeMajor, train


@pytest.mark.slow  # trains an RNN through the probe: 3 s
def test_a_time_major_rnn_records_its_batch_not_its_bptt(probe):  # noqa: F811
    _, sink = probe(steps=2, to_end=True)
    torch.manual_seed(0)
    batches = [(torch.randint(0, 30, (20, 4)), torch.randint(0, 30, (20, 4))) for _ in range(3)]
    train(TimeMajor(), batches, hidden=True)
    inputs = sink.gates["forward"]["inputs"]
    assert inputs["microbatch"] == 4 and inputs["batch_dim"] == 1 and "batch_first=False" in inputs["batch_dim_from"]
    assert sink.gates["validation"]["inputs"]["microbatch"] == 4
