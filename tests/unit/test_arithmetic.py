"""Batch arithmetic: exact figures, the incomplete last batch, replicas, and what a change moves."""

from __future__ import annotations

import pytest

from cockpit.arithmetic import (
    CAVEAT,
    BatchPlan,
    budget_from,
    describe,
    hold,
    plan_from,
    resolve_budget,
    what_changes,
)


def test_seed_example_16_per_update_and_200_updates() -> None:
    plan = BatchPlan(microbatch=2, accumulation=8)
    assert plan.examples_per_update == 16
    budget = resolve_budget(plan, examples=3200)
    assert budget.updates == 200
    assert budget.examples_seen == 3200


def test_one_epoch_of_3200_is_200_updates() -> None:
    plan = BatchPlan(2, 8, dataset_size=3200)
    assert plan.updates_per_epoch() == 200
    assert resolve_budget(plan, epochs=1).updates == 200
    assert resolve_budget(plan, updates=200).epochs_seen == 1.0


def test_drop_last_on_and_off() -> None:
    dropped = BatchPlan(2, 8, dataset_size=3210, drop_last=True)
    kept = BatchPlan(2, 8, dataset_size=3210, drop_last=False)
    assert dropped.updates_per_epoch() == 200
    assert dropped.examples_per_epoch() == 3200
    assert resolve_budget(dropped, epochs=1).incomplete_dropped == 10
    assert kept.updates_per_epoch() == 201
    assert kept.examples_per_epoch() == 3210
    two = resolve_budget(kept, epochs=2)
    assert (two.updates, two.examples_seen, two.epochs_seen) == (402, 6420, 2.0)
    assert resolve_budget(kept, examples=3210).updates == 201
    assert resolve_budget(dropped, examples=3210).updates == 200


def test_keep_last_without_a_dataset_counts_the_short_update() -> None:
    plan = BatchPlan(2, 8, drop_last=False)
    budget = resolve_budget(plan, examples=3210)
    assert (budget.updates, budget.examples_seen) == (201, 3210)


def test_data_replicas_multiply_the_batch() -> None:
    plan = BatchPlan(2, 8, data_replicas=4)
    assert plan.examples_per_update == 64
    assert plan.gpus == 4
    assert resolve_budget(plan, examples=3200).updates == 50


def test_model_parallelism_does_not_multiply_the_batch() -> None:
    plan = BatchPlan(2, 8, data_replicas=2, model_parallel=4)
    assert plan.examples_per_update == 32
    assert plan.gpus == 8
    assert any("does not multiply" in value for _, value in describe(plan))


def test_fractional_epochs_do_not_lose_an_update_to_rounding() -> None:
    plan = BatchPlan(1, 1, dataset_size=100)
    assert plan.updates_for(epochs=0.29) == 29
    assert plan.updates_for(epochs=1.5) == 150


@pytest.mark.parametrize("bad", [0, -1])
def test_impossible_factors_are_refused(bad: int) -> None:
    for field in ("microbatch", "accumulation", "data_replicas", "model_parallel"):
        kwargs = {"microbatch": 2, field: bad}
        with pytest.raises(ValueError, match=field):
            BatchPlan(**kwargs)


def test_exactly_one_budget() -> None:
    plan = BatchPlan(2, 8)
    with pytest.raises(ValueError, match="exactly one"):
        resolve_budget(plan)
    with pytest.raises(ValueError, match="exactly one"):
        resolve_budget(plan, updates=1, examples=16)
    with pytest.raises(ValueError, match="dataset_size"):
        resolve_budget(plan, epochs=1)


# --------------------------------------------------------------------------- what a change moves

REF = BatchPlan(2, 8, dataset_size=3200)
DOUBLE = BatchPlan(4, 8, dataset_size=3200)


def test_at_fixed_updates_a_bigger_batch_sees_more_examples() -> None:
    ref_budget = resolve_budget(REF, updates=200)
    moved = hold("updates", DOUBLE, ref_budget)
    assert (moved.updates, moved.examples_seen, moved.epochs_seen) == (200, 6400, 2.0)
    text = what_changes("updates", REF, DOUBLE, ref_budget)
    assert "fixed 200 updates" in text and "examples seen change 3200 -> 6400" in text


def test_at_fixed_epochs_a_bigger_batch_takes_fewer_updates() -> None:
    ref_budget = resolve_budget(REF, epochs=1)
    moved = hold("epochs", DOUBLE, ref_budget)
    assert (moved.updates, moved.examples_seen) == (100, 3200)
    assert "updates change 200 -> 100" in what_changes("epochs", REF, DOUBLE, ref_budget)


def test_at_fixed_examples_a_bigger_batch_takes_fewer_updates() -> None:
    ref_budget = resolve_budget(BatchPlan(2, 8), examples=3200)
    moved = hold("examples", BatchPlan(4, 8), ref_budget)
    assert (moved.updates, moved.examples_seen) == (100, 3200)
    assert "updates change 200 -> 100" in what_changes("examples", BatchPlan(2, 8), BatchPlan(4, 8), ref_budget)


def test_fixed_epochs_use_the_epochs_asked_for_not_the_examples_left_after_dropping() -> None:
    ref = BatchPlan(2, 8, dataset_size=3210)
    ref_budget = resolve_budget(ref, epochs=1)
    assert ref_budget.epochs_seen == pytest.approx(3200 / 3210)
    moved = hold("epochs", BatchPlan(1, 8, dataset_size=3210), ref_budget)
    assert moved.updates == 401  # one whole epoch at 8 per update, not 0.997 of it


def test_same_batch_changes_nothing() -> None:
    ref_budget = resolve_budget(REF, updates=200)
    assert "unchanged" in what_changes("updates", REF, BatchPlan(4, 4, dataset_size=3200), ref_budget)


def test_held_must_be_known() -> None:
    with pytest.raises(ValueError, match="held_constant"):
        what_changes("seconds", REF, DOUBLE, resolve_budget(REF, updates=1))


def test_plan_and_budget_from_campaign_parameters() -> None:
    params = {"microbatch": 2, "accumulation": 8, "updates": 200, "drop_last": True}
    plan = plan_from(params)
    assert plan.examples_per_update == 16
    assert budget_from(plan, params).updates == 200


def test_the_caveat_says_counts_predict_neither_duration_nor_quality() -> None:
    assert "predict neither duration nor quality" in CAVEAT


def test_training_drops_the_incomplete_last_update_as_the_arithmetic_counts_it() -> None:
    """40 examples, 16 per update: 2 updates per epoch, and the 8 left over are not trained in update 3."""
    from cockpit.pilot.order import DataOrder

    plan = BatchPlan(microbatch=2, accumulation=8, dataset_size=40)
    order = DataOrder(40, microbatch=2, seed=0, accumulation=8)
    first_epoch = order.perm(0)
    updates = [order.next_update() for _ in range(plan.updates_per_epoch() + 1)]
    seen = [i for u in updates[:2] for mb in u for i in mb]
    assert plan.updates_per_epoch() == 2 and len(seen) == 32 == plan.examples_per_epoch()
    assert seen == first_epoch[:32]
    third = [i for mb in updates[2] for i in mb]
    assert order.epoch == 1 and third == order.perm(1)[:16]  # a new epoch, not the 8 left out
    assert set(first_epoch[32:]).isdisjoint(seen)
    kept = DataOrder(40, microbatch=2, seed=0, drop_last=False, accumulation=8)
    last = [kept.next_update() for _ in range(3)][2]
    assert sum(len(mb) for mb in last) == 8  # without drop_last the last update is the smaller one
