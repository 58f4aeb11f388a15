"""Values the task's functions return that Cockpit cannot use are the task's mistake (UserCodeError, exit 5), said
in one line naming the function; found by running 107 broken tasks, 34 of which once ended as a bug in Cockpit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from cockpit.pilot import outputs, returned
from cockpit.pilot.checkpoint import _python_scalars
from cockpit.pilot.inspection import plain
from cockpit.pilot.splits import load
from cockpit.pilot.task import Task, TaskError
from cockpit.pilot.usercode import UserCodeError, user_int

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("second", "said"),
    [("ok", "a str"), (None, "a NoneType"), (torch.ones(4, 3), "shape (4, 3)"), ({"n": 3}, "a dict")],
)
def test_a_second_element_that_is_no_count_is_the_losss_mistake(second: object, said: str) -> None:
    with pytest.raises(UserCodeError, match="second element of \\(sum, count\\)") as err:
        outputs.read_loss((torch.tensor(2.0), second), CPU)
    assert err.value.where == "loss" and said in str(err.value) and "(logits, loss)" in str(err.value)


def test_a_count_as_a_number_a_numpy_scalar_or_a_one_element_tensor_is_read() -> None:
    for c in (8, 8.0, np.int64(8), torch.tensor(8), torch.tensor([8])):
        got = outputs.read_loss((torch.tensor(2.0), c), CPU)
        assert got.count is not None and float(got.count) == 8.0 and got.count.dim() == 0


@pytest.mark.parametrize(("value", "want"), [(7, 7), (7.0, 7), ("16", 16), (np.int64(5), 5), (torch.tensor(3), 3)])
def test_whole_numbers_in_any_form_are_read(value: object, want: int) -> None:
    assert user_int("length", lambda: value) == want


@pytest.mark.parametrize("value", [None, "long", 7.5, torch.ones(2), True])
def test_anything_else_is_the_functions_mistake(value: object) -> None:
    with pytest.raises(UserCodeError, match="must return a whole number") as err:
        user_int("length", lambda: value)
    assert err.value.where == "length"
    assert user_int("max_length", lambda: None, none=True) is None  # no crop


def test_models_optimizers_and_schedulers_cockpit_cannot_drive_are_named() -> None:
    net = nn.Linear(2, 2)
    with pytest.raises(UserCodeError, match="TorchScript"):
        returned.model(torch.jit.script(net))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for sched, words in (
        (torch.optim.lr_scheduler.ReduceLROnPlateau(opt), "validation metric"),
        (opt, "a second optimizer step"),
        (type("Sched", (), {"step": lambda self: None})(), "state_dict"),
    ):
        with pytest.raises(UserCodeError, match=words):
            returned.scheduler(sched)
    duck = type("Duck", (), {"param_groups": [], "step": lambda self: None})()
    with pytest.raises(UserCodeError, match="not a torch.optim.Optimizer"):
        returned.optimizer(duck, own_schedule=True)
    assert returned.optimizer(duck, own_schedule=False) is duck  # the task's own schedule steps it
    for value in (None, "fc.weight", list(net.parameters())):
        with pytest.raises(UserCodeError, match="names of the parameters"):
            returned.names(value)
    assert returned.names(iter(["weight"])) == {"weight"}


def test_rows_that_are_not_dicts_and_task_fields_of_the_wrong_type_are_refused() -> None:
    with pytest.raises(UserCodeError, match="not a dict"):
        load({"train": [(torch.ones(2), 1)]})
    base = {"build_model": lambda p: nn.Linear(2, 2), "datasets": lambda p: {}, "collate": lambda e, p: {}}
    for field, value in (("ignore_index", "-100"), ("group_unit", 7), ("label_key", None)):
        with pytest.raises(TaskError, match=f"Task.{field}"):
            Task(**base, **{field: value})


def test_numpy_scalars_in_examples_become_python_numbers_for_json_and_safe_loading() -> None:
    ex = {"id": np.int64(3), "y": np.float32(0.5), "x": [np.int64(1), 2], "t": (np.bool_(True),)}
    out = _python_scalars(ex)
    assert out == {"id": 3, "y": 0.5, "x": [1, 2], "t": (True,)} and type(out["id"]) is int
    assert plain(np.int64(3)) == 3 and plain(object).startswith("<class")
