"""The one rule for who is to blame (cockpit.blame), on tracebacks whose frames come from files of each origin.

Each frame's code is compiled under the file name of its origin (a task file, torch's autograd, a library in
site-packages, Cockpit's own modules), so the rule is tested on exactly what decides it: the files in the
traceback. Pure Python: no torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from cockpit import blame

COCKPIT = os.path.dirname(blame.__file__)
TORCH = "/venv/lib/python3.11/site-packages/torch/autograd/graph.py"
LIBRARY = "/venv/lib/python3.11/site-packages/transformers/modeling_utils.py"


def define(filename: str, src: str, name: str, **env: object) -> Callable[..., object]:
    """Function ``name`` of ``src``, as if it were written in ``filename`` (its frames name that file)."""
    scope: dict[str, object] = dict(env)
    exec(compile(src, filename, "exec"), scope)
    fn = scope[name]
    assert callable(fn)
    return fn


def caught(fn: Callable[[], object]) -> BaseException:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return exc
    raise AssertionError("did not raise")


def test_origins() -> None:
    assert blame.origin(TORCH) == "torch"
    assert blame.origin(LIBRARY) == "library"
    assert blame.origin(os.path.join(COCKPIT, "pilot", "microsteps.py")) == "cockpit"
    assert blame.origin(os.path.join(COCKPIT, "tasks", "tinylm.py")) == "user"  # the built-in tasks stand in
    assert blame.origin(os.__file__) == "stdlib"
    assert blame.origin("<frozen importlib._bootstrap>") == "stdlib"
    assert blame.origin("/home/me/campaigns/mine/task.py") == "user"


def test_build_model_raising_inside_torch_load_names_the_task_line_not_torch(tmp_path: Path) -> None:
    load = define(TORCH.replace("autograd/graph.py", "serialization.py"), "def load(f):\n    open(f)\n", "load")
    task = str(tmp_path / "task.py")
    build = define(
        task, "def build_model(params):\n    x = 1\n    return load('weights/missing.pt')\n", "build_model", load=load
    )
    run = define(os.path.join(COCKPIT, "pilot", "usercode.py"), "def call(fn):\n    return fn({})\n", "call")
    b = blame.of(caught(lambda: run(build)))
    assert b.user and b.at == f"{blame.shown(task)}:3 in build_model" and not b.via


def test_a_library_frame_is_the_models_code_and_shown_beside_the_users_line(tmp_path: Path) -> None:
    lib = define(
        LIBRARY, "def from_pretrained(name):\n    raise OSError(f'{name} is not a model')\n", "from_pretrained"
    )
    task = str(tmp_path / "task.py")
    build = define(
        task, "def build_model(params):\n    return from_pretrained('bert')\n", "build_model", from_pretrained=lib
    )
    b = blame.of(caught(lambda: build({})))
    assert b.user
    assert b.where == f"{blame.shown(task)}:2 in build_model (via transformers/modeling_utils.py:2 in from_pretrained)"


def test_cockpits_own_bug_is_cockpits() -> None:
    step = define(
        os.path.join(COCKPIT, "pilot", "phases", "steps.py"), "def forward():\n    return {}['x']\n", "forward"
    )
    b = blame.of(caught(step))
    assert not b.user  # raised in Cockpit's frame: the test's own frame around it does not make it the user's


def test_a_library_called_by_cockpit_is_cockpits_and_called_by_the_user_is_the_users(tmp_path: Path) -> None:
    lib = define(
        LIBRARY, "def stack(xs):\n    raise ValueError('all input arrays must have the same shape')\n", "stack"
    )
    scan = define(
        os.path.join(COCKPIT, "pilot", "datascan.py"), "def scan(xs):\n    return stack(xs)\n", "scan", stack=lib
    )
    assert not blame.of(caught(lambda: scan([]))).user  # a library frame belongs to whoever called it
    collate = define(str(tmp_path / "task.py"), "def collate(xs):\n    return stack(xs)\n", "collate", stack=lib)
    run = define(os.path.join(COCKPIT, "pilot", "trainer.py"), "def step(fn):\n    return fn([])\n", "step")
    assert blame.of(caught(lambda: run(collate))).user


def test_a_torch_error_from_cockpits_call_is_cockpits_unless_the_users_state_explains_it() -> None:
    def backward(message: str) -> Callable[[], object]:
        engine = define(TORCH, f"def run_backward():\n    raise RuntimeError({message!r})\n", "run_backward")
        return define(
            os.path.join(COCKPIT, "pilot", "microsteps.py"),
            "def back():\n    run_backward()\n",
            "back",
            run_backward=engine,
        )

    kept = blame.of(caught(backward("Trying to backward through the graph a second time (or directly access ...)")))
    assert kept.user and kept.state is not None and kept.state.label == "state kept across batches"
    assert ".detach()" in kept.remedy
    cut = blame.of(caught(backward("element 0 of tensors does not require grad and does not have a grad_fn")))
    assert cut.user and cut.state is not None and cut.state.label == "a loss cut from its graph"
    other = blame.of(caught(backward("expected scalar type Float but found Half")))
    assert not other.user and other.state is None


def test_cockpit_raising_the_state_words_itself_is_still_cockpits() -> None:
    own = define(
        os.path.join(COCKPIT, "pilot", "microsteps.py"),
        "def back():\n    raise RuntimeError('backward through the graph a second time')\n",
        "back",
    )
    assert not blame.of(caught(own)).user  # only torch's autograd raising it says the graph is the user's


def test_a_user_code_error_is_the_users_even_without_a_user_frame() -> None:
    err = blame.UserCodeError("collate", TypeError("must return a dict of tensors, got list"))
    b = blame.of(err)
    assert b.user and b.at == ""
    assert blame.user_error(err) is err


def test_a_syntax_error_names_the_line_that_does_not_parse(tmp_path: Path) -> None:
    task = tmp_path / "task.py"
    task.write_text("def collate(examples, params)\n    return {}\n")
    exc = caught(lambda: compile(task.read_text(), str(task), "exec"))
    b = blame.of(blame.UserCodeError("task import", exc))
    assert b.user and b.at == f"{blame.shown(str(task))}:1"


def test_a_mistyped_params_key_gets_did_you_mean(tmp_path: Path) -> None:
    build = define(str(tmp_path / "task.py"), "def build_model(params):\n    return params['hidden']\n", "build_model")
    params = {"hiden": 32, "features": 8, "lr": 0.01}
    b = blame.of(blame.UserCodeError("build_model", caught(lambda: build(params))), params)
    assert "did you mean 'hiden'?" in b.remedy
    far = define(str(tmp_path / "t2.py"), "def f(params):\n    return params['labels']\n", "f")
    assert blame.of(caught(lambda: far(params)), params).remedy == ""  # nothing close: no guess


@pytest.mark.parametrize("inner", ["user", "library"])
def test_user_error_wraps_what_the_rule_calls_the_users(tmp_path: Path, inner: str) -> None:
    path = str(tmp_path / "model.py") if inner == "user" else LIBRARY
    fwd = define(path, "def forward(x):\n    return x.missing\n", "forward")
    loss = define(str(tmp_path / "task.py"), "def loss(x):\n    return forward(x)\n", "loss", forward=fwd)
    run = define(os.path.join(COCKPIT, "pilot", "trainer.py"), "def step(fn):\n    return fn(1)\n", "step")
    err = blame.user_error(caught(lambda: run(loss)))
    assert err is not None and isinstance(err.exc, AttributeError)
    assert err.where == ("forward" if inner == "user" else "loss")  # the deepest function of the user's own files
