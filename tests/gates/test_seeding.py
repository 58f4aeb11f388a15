"""The run's seed reaches the model: a build_model that reseeds torch's generator with a constant makes every seed
of the campaign the same run (the weights initialised after it, every dropout mask, every random draw)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cockpit.pilot import seeding
from tests.gates.test_phases import check, classifier, through


def _reseeds(params: dict[str, Any]) -> nn.Module:
    torch.manual_seed(1234)  # a script's set_seed(1234), moved into build_model
    return nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 3))


def _teacher_fixed(params: dict[str, Any]) -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(1234)  # fixed on purpose, and restored
        teacher = nn.Linear(6, 3).requires_grad_(False)
    return nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3), teacher.eval())[:3]


def test_a_build_model_that_reseeds_torch_fails_naming_its_line() -> None:
    c = check(through(classifier(build_model=_reseeds), "forward")["forward"], seeding.NAME)
    assert not c["ok"] and "left torch's random generator seeded with 1234" in c["detail"], c
    assert "test_seeding.py:16" in c["detail"] and "(_reseeds)" in c["detail"], c
    assert "fork_rng" in c["detail"], c


def test_a_reseed_undone_before_build_model_returns_passes_and_is_said() -> None:
    c = check(through(classifier(build_model=_teacher_fixed), "forward")["forward"], seeding.NAME)
    assert c["ok"] and "seeded with 1234 (" in c["detail"] and "restored after" in c["detail"], c
    c = check(through(classifier(), "forward")["forward"], seeding.NAME)
    assert c["ok"] and "restored" not in c["detail"], c


def test_the_watch_leaves_torch_as_it_was() -> None:
    before = torch.manual_seed, torch.random.manual_seed
    with torch.random.fork_rng(), seeding.watched() as s:
        torch.manual_seed(5)
    assert (torch.manual_seed, torch.random.manual_seed) == before
    assert s.left == 5 and [v for v, _ in s.calls] == [5]


def test_a_seed_torch_refuses_is_torchs_error_in_the_users_call() -> None:
    import pytest

    with torch.random.fork_rng(), seeding.watched() as s, pytest.raises((TypeError, RuntimeError, ValueError)) as e:
        torch.manual_seed("forty-two")  # type: ignore[arg-type]
    assert "seeding.py" not in "".join(str(f) for f in e.traceback[-1:]), e.traceback
    assert s.calls == []
