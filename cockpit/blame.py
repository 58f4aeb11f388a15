"""Who is to blame for an exception: the one rule, asked by every phase, run process, probe and check. No torch.

An exception is **the user's** when the deepest frame that caused it is the user's code, or when Cockpit's own
call failed on state the user's code left behind. Everything else is Cockpit's (exit 6, "a bug in Cockpit").

Each frame of a traceback has an origin, decided by its file alone (:func:`origin`):

- ``cockpit``: a file of the Cockpit package, except its built-in example tasks (``cockpit/tasks/``), which stand
  in for a user's task;
- ``torch``: a file of the ``torch`` package (and of its compiler stack, ``triton``): the framework both sides call;
- ``stdlib``: Python's standard library, and the interpreter's frozen modules (``<frozen importlib._bootstrap>``);
- ``library``: any other installed package (``site-packages``, ``dist-packages``): transformers, PEFT, timm,
  torchvision, numpy. Called from the user's ``build_model`` or ``loss`` it is the model's code, so the user's;
- ``user``: every other file: the task's files, the probed script, the model's own modules.

The rule (:func:`of`): walk the traceback from the innermost frame out, passing over torch's, the standard
library's and the installed libraries' frames (a library's frame is whoever called it: the model's code when the
user's code called it, Cockpit's when Cockpit did). The first frame left decides: ``user``, the user's;
``cockpit``, Cockpit's, unless the exception is one of torch's autograd errors that only the state the user's
code built can cause (a graph kept from an earlier batch, a tensor the graph saved and the model then changed in
place, a loss cut from its graph): then the user's, with what that state is and how to remove it. A :class:`UserCodeError` (an
exception Cockpit caught around a call of the task's code, or a value the task returned that Cockpit cannot use)
is the user's whatever its frames. A ``SyntaxError`` names the file and line that do not parse.

The file:line shown (:attr:`Blame.at`) is the deepest frame of the user's own files (never torch's
``serialization.py`` for a ``torch.load`` in ``build_model``, never a library's); a deeper library frame the
exception passed through is shown beside it (:attr:`Blame.via`).
"""

from __future__ import annotations

import difflib
import functools
import os
import sys
import sysconfig
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Origin = Literal["cockpit", "torch", "stdlib", "library", "user"]

_HERE = os.path.dirname(os.path.realpath(__file__))  # the cockpit package
_OWN_TASKS = (os.path.join(_HERE, "tasks") + os.sep, os.path.join(_HERE, "templates") + os.sep)
_LIBRARY_DIRS = ("site-packages", "dist-packages")
_FRAMEWORKS = ("torch", "triton")  # what both sides call; its frames decide nothing


class UserCodeError(Exception):
    """An exception raised inside the task's own code, or a value it returned that Cockpit cannot use.

    ``where`` names the task's function ("build_model", "loss"); ``exc`` is what it raised."""

    def __init__(self, where: str, exc: BaseException):
        self.where, self.exc = where, exc
        super().__init__(f"{where} raised {type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class StateError:
    """One of torch's autograd errors that only the state the user's code built can cause."""

    words: str  # what torch's message says
    label: str  # the state, in a few words
    what: str  # the state, said in full
    remedy: str  # what to do; "hidden" stands for the attribute that holds the state

    def remedy_for(self, attr: str) -> str:
        """The remedy, naming the attribute found to hold the state (``self.state``) instead of the example."""
        return self.remedy.replace("self.hidden", f"self.{attr}") if attr.isidentifier() else self.remedy


# Raised when Cockpit calls backward on the loss the task returned, these are the user's whatever frame raised.
STATE_ERRORS: tuple[StateError, ...] = (
    StateError(
        "backward through the graph a second time",
        "state kept across batches",
        "a tensor kept from an earlier batch (a recurrent hidden state, a cache, a running total) still holds that "
        "batch's graph, which its backward has already freed",
        "`.detach()` the state between batches (self.hidden = self.hidden.detach() before it is used again), or "
        "start it anew for each batch",
    ),
    StateError(
        "modified by an inplace operation",
        "a tensor changed in place after the graph saved it",
        "a tensor the graph saved for the backward was changed in place afterwards (x += ..., x[i] = ..., "
        "an inplace=True activation, or state updated in place between forward and backward)",
        "use the out-of-place form (x = x + ..., torch.relu(x)), or .clone() the tensor before changing it",
    ),
    StateError(
        "does not require grad and does not have a grad_fn",
        "a loss cut from its graph",
        "the loss is cut from the model's parameters (computed under torch.no_grad(), through .item(), .detach() "
        "or .data, or rebuilt with torch.tensor())",
        "return the loss tensor itself as computed from the model's output, not a number or a copy made from it",
    ),
)


@dataclass(frozen=True)
class Blame:
    """Whose an exception is, where in the user's code, and what to do about it."""

    user: bool  # the user's to fix (exit 1 or 5); False: a defect in Cockpit (exit 6)
    at: str  # the deepest frame of the user's own files, 'file:line in function', or ""
    via: str = ""  # a deeper frame of a library the exception passed through (transformers ...), or ""
    state: StateError | None = None  # the state the user's code left that torch's autograd refused, if that
    remedy: str = ""  # what to do, when the exception itself says it (a state, a mistyped params key), or ""
    function: str = ""  # the function of the deepest user frame ("forward"), or ""

    @property
    def where(self) -> str:
        """``at``, with the library frame beside it: what a message names."""
        if not self.at:
            return self.via
        return f"{self.at} (via {self.via})" if self.via else self.at


@functools.lru_cache(maxsize=1)
def _stdlib_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib") if paths.get(k)}
    return tuple(d + os.sep for d in dirs)


def _framework_dirs() -> tuple[str, ...]:
    """The folders of torch and triton as imported in this process (never imported here)."""
    out = []
    for name in _FRAMEWORKS:
        mod = sys.modules.get(name)
        file = getattr(mod, "__file__", None)
        if file:
            out.append(os.path.dirname(os.path.realpath(file)) + os.sep)
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def _origin(filename: str, frameworks: tuple[str, ...]) -> Origin:
    if filename.startswith("<"):
        return "stdlib" if filename.startswith("<frozen ") else "user"  # <string>, <stdin>: code the user ran
    path = os.path.realpath(filename)
    if path.startswith(_HERE + os.sep):
        return "user" if path.startswith(_OWN_TASKS) else "cockpit"
    parts = path.split(os.sep)
    for i, part in enumerate(parts[:-1]):
        if part in _LIBRARY_DIRS:
            return "torch" if parts[i + 1] in _FRAMEWORKS else "library"
    if path.startswith(frameworks):
        return "torch"
    if path.startswith(_stdlib_dirs()):
        return "stdlib"
    return "user"


def origin(filename: str) -> Origin:
    """Whose file this is: Cockpit's, torch's, the standard library's, an installed library's or the user's."""
    return _origin(filename, _framework_dirs())


def shown(filename: str) -> str:
    """A file as a message names it: relative to the current folder when it lies below it, else as given."""
    if filename.startswith("<"):
        return filename
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith(os.pardir) else rel


def defined_at(fn: object) -> str:
    """Where a function of the user's is defined, as a message names it: ``campaigns/example/my_task.py:41 (collate)``; its name
    alone when it has no source (a builtin, a C extension's callable)."""
    f = getattr(fn, "__func__", fn)
    while hasattr(f, "__wrapped__"):
        f = f.__wrapped__
    code = getattr(f, "__code__", None)
    name = getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or type(fn).__name__
    if code is None:
        return str(name)
    return f"{shown(code.co_filename)}:{code.co_firstlineno} ({name})"


def frame_words(f: traceback.FrameSummary) -> str:
    return f"{shown(f.filename)}:{f.lineno} in {f.name}"


def calling_line(skip: int = 2) -> str:
    """The deepest line of the user's own code on the current stack (the call into a function Cockpit wraps), as a
    message names it; empty when none is the user's. ``skip``: the innermost frames left out (the wrapper's)."""
    for f in reversed(traceback.extract_stack()[:-skip]):
        if origin(f.filename) == "user":
            return frame_words(f)
    return ""


def _library_words(f: traceback.FrameSummary) -> str:
    """A library frame from its package on: for transformers' modeling_utils.py at line 12, its package's folder
    and then 'modeling_utils.py:12 in forward'."""
    parts = os.path.realpath(f.filename).split(os.sep)
    for i, part in enumerate(parts[:-1]):
        if part in _LIBRARY_DIRS:
            return f"{'/'.join(parts[i + 1 :])}:{f.lineno} in {f.name}"
    return frame_words(f)


def frames_of(exc: BaseException) -> list[traceback.FrameSummary]:
    return list(traceback.extract_tb(exc.__traceback__))


def of(exc: BaseException, params: Mapping[str, object] | None = None) -> Blame:
    """Whose ``exc`` is (see the module's rule), with the user's file:line and, where it can tell, the remedy.

    ``params``, when given, are the run's parameters: a ``KeyError`` on a key they lack but nearly have gets a
    "did you mean" (``params["hidden"]`` where the notebook says ``hiden``)."""
    inner = exc.exc if isinstance(exc, UserCodeError) else exc
    frames = frames_of(inner)
    origins = [origin(f.filename) for f in frames]
    own = [f for f, o in zip(frames, origins, strict=True) if o == "user"]
    at = frame_words(own[-1]) if own else ""
    function = own[-1].name if own else ""
    lib_idx = [i for i, o in enumerate(origins) if o == "library"]
    own_idx = [i for i, o in enumerate(origins) if o == "user"]
    via = _library_words(frames[lib_idx[-1]]) if lib_idx and (not own_idx or lib_idx[-1] > own_idx[-1]) else ""
    if isinstance(inner, SyntaxError) and inner.filename and origin(inner.filename) in ("user", "library"):
        at, function = f"{shown(inner.filename)}:{inner.lineno}", ""
    state = _state(inner, origins)
    remedy = _key_hint(inner, params) or (state.remedy if state is not None else "")
    # a library's frame is whoever called it: the model's code when the user's code did, Cockpit's when Cockpit did
    deciding: Origin | None = next((o for o in reversed(origins) if o in ("user", "cockpit")), None)
    if deciding is None and "library" in origins:
        deciding = "library"  # a library that ran the whole program (a launcher): the user's
    user = (
        isinstance(exc, UserCodeError)
        or deciding in ("user", "library")
        or (isinstance(inner, SyntaxError) and bool(at))
        or state is not None  # Cockpit's own backward, on the graph the user's code built
    )
    return Blame(user, at, via, state, remedy, function)


def _state(exc: BaseException, origins: list[Origin]) -> StateError | None:
    if not origins or origins[-1] != "torch":  # raised inside torch (its autograd engine), not by Cockpit itself
        return None
    return next((e for e in STATE_ERRORS if e.words in str(exc)), None)


def _key_hint(exc: BaseException, params: Mapping[str, object] | None) -> str:
    if not isinstance(exc, KeyError) or not params or len(exc.args) != 1 or not isinstance(exc.args[0], str):
        return ""
    key = exc.args[0]
    if key in params:
        return ""
    close = difflib.get_close_matches(key, [str(k) for k in params], n=1, cutoff=0.75)
    if not close:
        return ""
    return (
        f"params has no key {key!r}: did you mean {close[0]!r}? (campaign.toml's [task.params] and the task must "
        "spell it the same)"
    )


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's first line, cut to ``limit`` characters (its type when it says nothing)."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first if len(first) <= limit else first[: limit - 1] + "…"


def called(where: str) -> str:
    """A UserCodeError's ``where`` as a message names it: "build_model()", or "task import" as it is."""
    return f"{where}()" if where.isidentifier() else where


def user_error(exc: BaseException, params: Mapping[str, object] | None = None) -> UserCodeError | None:
    """``exc`` as the user's error when :func:`of` says it is the user's (None when it is Cockpit's).

    A :class:`UserCodeError` is returned as it is; another exception blamed on the user is wrapped, its
    ``where`` the user's function (or "loss" when the state the task left failed Cockpit's backward)."""
    if isinstance(exc, UserCodeError):
        return exc
    b = of(exc, params)
    if not b.user:
        return None
    where = "loss" if b.state is not None else (b.function or "task code")
    return UserCodeError(where, exc)
