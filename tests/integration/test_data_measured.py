"""The data gate measures where it can and says *not applicable* where a check's precondition does not hold: the tests
that start processes or load models (the rest: tests/gates/test_data_measured.py)."""

from __future__ import annotations

from typing import Any

import pytest

from cockpit.pilot.task import Task
from tests.gates.test_data_measured import VOCAB, check, data_gate, seq2seq, t5, t5_collate


@pytest.mark.slow  # builds a transformers T5: 3.5 s
def test_an_encoder_decoders_labels_are_not_compared_with_the_encoder_input_and_its_shift_is_measured() -> None:
    task = Task(build_model=t5, datasets=seq2seq, collate=t5_collate, kind="generation", vocab_size=lambda p: VOCAB)
    g, _ = data_gate(task)
    assert not [c for c in g.checks if not c["ok"]], g.checks
    assert check(g, "targets aligned with inputs").get("na")
    assert "next token" in check(g, "targets aligned as declared")["detail"]

    def fed_labels(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        b = t5_collate(examples, params)
        return {**b, "decoder_input_ids": b["labels"].clone()}  # the shift right forgotten

    g, _ = data_gate(Task(**{**task.__dict__, "collate": fed_labels}))
    c = check(g, "targets aligned as declared")
    assert not c["ok"] and "copy" in c["detail"], c
