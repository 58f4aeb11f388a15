"""`cockpit batch --json` prints typed records (commands/batch.py's BatchResult); they keep every field of the
arithmetic's dataclasses, so a field added there cannot silently go missing from the JSON."""

from __future__ import annotations

import dataclasses
import typing

from cockpit.arithmetic import BatchPlan, Budget
from cockpit.commands import batch


def test_the_records_hold_every_field_of_the_plan_and_the_budget() -> None:
    entry = typing.get_type_hints(batch.BatchEntry)
    assert {f.name for f in dataclasses.fields(BatchPlan)} <= set(entry)
    assert [f.name for f in dataclasses.fields(Budget)] == list(typing.get_type_hints(batch.BudgetRecord))


def test_an_entry_lists_the_plan_in_its_own_order_then_the_derived_figures() -> None:
    plan = BatchPlan(microbatch=2, accumulation=8, dataset_size=1000)
    entry = batch.plan_entry("batch", plan, None)
    plan_fields = [f.name for f in dataclasses.fields(BatchPlan)]
    assert list(entry)[: 1 + len(plan_fields)] == ["label", *plan_fields]
    assert (entry["examples_per_update"], entry["updates_per_epoch"], entry["gpus"]) == (16, 62, 1)
