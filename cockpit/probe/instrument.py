"""The hooks inside the probed script's interpreter: PyTorch's global hooks, wired to the :class:`Observer`.

Installed by :func:`start` when the script imports torch (:mod:`cockpit.probe.boot`):

- ``torch.nn.modules.module.register_module_forward_pre_hook`` / ``register_module_forward_hook``
  (global): the outermost module call of a forward pass (a *root*: the model, a loss module); once
  the first optimizer step is done they are replaced by hooks on those roots only, so the later
  steps run without a hook on every submodule;
- ``torch.optim.optimizer.register_optimizer_step_pre_hook`` / ``_post_hook`` (global): every step;
- ``torch.autograd.backward``: backward, observed through the loss tensor it is given;
- ``torch.save`` / ``torch.load``, and ``safetensors.torch``'s ``save_file`` / ``load_file`` when the
  script uses them (Hugging Face checkpoints): the checkpoint's files, their size and time.

Every hook body is guarded: a failure of the instrumentation is sent to the run process (which ends
the run as Cockpit's error, exit 6) and the hooks are removed; it never becomes the script's error.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.modules.module as module_hooks
import torch.optim.optimizer as optimizer_hooks

from .. import blame
from . import channel as ch
from .observer import Config, Observer, ProbeStop, is_oom, user_frame
from .reading import cockpit_raised

_current: Instrument | None = None


class Instrument:
    def __init__(self, obs: Observer, send: Callable[..., None], broken: Callable[[], bool] = lambda: False):
        self.obs = obs
        self.send = send
        self.broken = broken
        self.handles: list[Any] = []
        self.classes: list[tuple[type, Any]] = []  # root classes whose __call__ watches the roots
        self.patches: list[tuple[Any, str, Any]] = []
        self.depth = 0
        self.dead = False
        self.finders: list[Any] = []

    # ------------------------------------------------------------------ wiring

    def install(self) -> None:
        mm, oo = module_hooks, optimizer_hooks
        self.handles = [
            mm.register_module_forward_pre_hook(self._pre),
            mm.register_module_forward_hook(self._post, with_kwargs=True, always_call=True),
            oo.register_optimizer_step_pre_hook(self._step_pre),
            oo.register_optimizer_step_post_hook(self._step_post),
        ]
        self._patch(torch.autograd, "backward", self._backward(torch.autograd.backward))
        self._patch(torch, "save", self._saver(torch.save, target=1))
        self._patch(torch, "load", self._loader(torch.load))
        self._patch(torch.optim.Optimizer, "__init__", self._optimizer_init(torch.optim.Optimizer.__init__))
        loader = torch.utils.data.DataLoader
        self._patch(loader, "__init__", self._loader_init(loader.__init__))
        self._after_import("safetensors.torch", self._safetensors)

    def uninstall(self) -> None:
        self.obs.abandon()  # a phase left open is closed (its bounds), not recorded
        for h in self.handles:
            h.remove()
        self.handles = []
        for cls, own in reversed(self.classes):
            if own is None:
                with contextlib.suppress(AttributeError):
                    del cls.__call__
            else:
                cls.__call__ = own
        self.classes = []
        for owner, name, orig in reversed(self.patches):
            setattr(owner, name, orig)
        self.patches = []
        for f in self.finders:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(f)
        self.finders = []

    def _patch(self, owner: Any, name: str, new: Any) -> None:
        self.patches.append((owner, name, getattr(owner, name)))
        setattr(owner, name, new)

    def _safetensors(self, module: Any) -> None:
        for name, target in (("save_file", 1), ("save_model", 1)):
            if hasattr(module, name):
                self._patch(module, name, self._saver(getattr(module, name), target=target))
        for name, target in (("load_file", 0), ("load_model", 1)):
            if hasattr(module, name):
                self._patch(module, name, self._loader(getattr(module, name), target=target))

    def _after_import(self, name: str, patch: Callable[[Any], None]) -> None:
        """Patch a module once it is imported (now, when it already is), before anyone binds its functions."""
        mod = sys.modules.get(name)
        if mod is not None and getattr(getattr(mod, "__spec__", None), "_initializing", False) is False:
            patch(mod)
            return
        finder = _AfterImport(name, patch)
        self.finders.append(finder)
        sys.meta_path.insert(0, finder)

    def go_local(self) -> None:
        """From now on only the roots are watched, so a submodule's call costs nothing.

        Nothing is put on the user's objects: a hook in a module's own hook dicts is pickled with it
        (``torch.save(model)``, ``copy.deepcopy``: a bound method of this object, holding a lock, cannot
        be) and refused by ``torch.jit.script``. The roots' classes get a ``__call__`` that watches the
        registered instances only (by id, checked against a weak reference); a class is pickled by name.
        """
        if self.classes or self.dead:
            return
        live = [m for m in (ref() for ref in self.obs.roots.values()) if m is not None]
        if not live:
            return
        # a wrapper's inner model (DistributedDataParallel.module, DataParallel.module) is watched too: a script
        # evaluates it directly (on rank 0 alone, where the wrapper's forward would wait for the other ranks)
        inner = [x for m in live if isinstance(x := getattr(m, "module", None), torch.nn.Module)]
        for cls in {type(m) for m in live + inner}:
            self._wrap_call(cls)
        for h in self.handles[:2]:
            h.remove()
        self.handles = self.handles[2:]
        self.depth = 0

    def _wrap_call(self, cls: type) -> None:
        own = cls.__dict__.get("__call__")
        orig = cls.__call__
        roots = self.obs.roots
        pre, post = self._pre, self._post

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            ref = roots.get(id(module))
            if self.depth and (ref is None or not _same(ref(), module)):
                return orig(module, *args, **kwargs)  # inside a root's call: a submodule of the same class
            # a root, or an outermost call of a root's class (a deep copy of the model: an EMA, the best one)
            pre(module, args)
            out = None
            try:
                out = orig(module, *args, **kwargs)
            finally:
                post(module, args, kwargs, out)
            return out

        __call__.__wrapped__ = orig  # type: ignore[attr-defined]
        cls.__call__ = __call__  # type: ignore[method-assign]
        self.classes.append((cls, own))

    # ------------------------------------------------------------------ the hooks

    def _pre(self, module: torch.nn.Module, args: Any) -> None:
        d = self.depth
        self.depth = d + 1
        if d == 0 and not self.dead:
            self._call(self.obs.forward_pre, module, args)

    def _post(self, module: torch.nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        self.depth = max(0, self.depth - 1)
        if self.depth == 0 and not self.dead:
            self._call(self.obs.forward_post, module, args, kwargs, output)

    def _step_pre(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> Any:
        if self.dead:
            return None
        closure = args[1] if len(args) > 1 else kwargs.get("closure")  # args[0] is the optimizer
        main = self._call(self.obs.step_pre, opt, callable(closure))
        if not main or not callable(closure):
            return None
        # optimizer.step(closure) (LBFGS, Lightning's automatic optimization): the forward and backward the
        # closure runs belong to this update, so they are watched as a training step's are
        wrapped = self._closure(closure)
        if len(args) > 1:
            return (args[0], wrapped, *args[2:]), kwargs
        return args, {**kwargs, "closure": wrapped}

    def _closure(self, closure: Callable[..., Any]) -> Callable[..., Any]:
        obs = self.obs

        def closure_watched(*args: Any, **kwargs: Any) -> Any:
            obs.closure_calls += 1
            obs.in_step = False
            try:
                return closure(*args, **kwargs)
            finally:
                obs.in_step = True

        return closure_watched

    def _step_post(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self.dead:
            self._call(self.obs.step_post, opt)
            if self.obs.step >= 1 and not self.classes:
                self.go_local()

    def _backward(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        obs = self.obs

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if self.dead or obs.in_backward or obs.in_step:
                return orig(tensors, *args, **kwargs)
            measured = self._call(obs.backward_begin, tensors)
            obs.in_backward = True
            try:
                out = orig(tensors, *args, **kwargs)
            finally:
                obs.in_backward = False
            self._call(obs.backward_end, bool(measured))
            if obs.step >= 1 and not self.classes and not self.dead:
                self.go_local()  # updates made without an optimizer: the hooks leave the submodules here
            return out

        backward.__wrapped__ = orig  # type: ignore[attr-defined]
        return backward

    def _optimizer_init(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        """Every optimizer the script builds (a weak set): which parameters some optimizer holds."""
        obs = self.obs

        def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
            orig(opt, *args, **kwargs)
            if not self.dead:
                with contextlib.suppress(TypeError):
                    obs.optimizers.add(opt)

        __init__.__wrapped__ = orig  # type: ignore[attr-defined]
        return __init__

    def _loader_init(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        """Every DataLoader's batch_size: where the batch dimension is not dim 0, it says which one is."""
        obs = self.obs

        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            orig(loader, *args, **kwargs)
            bs = getattr(loader, "batch_size", None)
            if not self.dead and isinstance(bs, int) and bs > 1:
                obs.loader_sizes.add(bs)

        __init__.__wrapped__ = orig  # type: ignore[attr-defined]
        return __init__

    def _saver(self, orig: Callable[..., Any], target: int) -> Callable[..., Any]:
        obs = self.obs

        def save(*args: Any, **kwargs: Any) -> Any:
            if self.dead or obs.in_save:
                return orig(*args, **kwargs)
            token = self._call(obs.save_begin, _arg(args, kwargs, target))
            obs.in_save = True
            try:
                out = orig(*args, **kwargs)
            finally:
                obs.in_save = False
            if token is not None:
                self._call(obs.save_end, token)
            return out

        save.__wrapped__ = orig  # type: ignore[attr-defined]
        return save

    def _loader(self, orig: Callable[..., Any], target: int = 0) -> Callable[..., Any]:
        obs = self.obs

        def load(*args: Any, **kwargs: Any) -> Any:
            if not self.dead and not obs.in_save:
                self._call(obs.load, _arg(args, kwargs, target))
            return orig(*args, **kwargs)

        load.__wrapped__ = orig  # type: ignore[attr-defined]
        return load

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except ProbeStop:
            raise
        except BaseException as exc:
            if getattr(exc, "_cockpit_injected", False) or isinstance(exc, KeyboardInterrupt):
                raise
            self._broken(exc)
            return None

    def _broken(self, exc: BaseException) -> None:
        """The instrumentation failed: say so, remove every hook, let the script go on unobserved."""
        self.dead = True
        with contextlib.suppress(Exception):
            self.uninstall()
        if self.broken():  # the run process is gone: nobody records this script, which dies with its run
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        print(f"--- cockpit probe: internal error ---\n{text}", file=sys.stderr, flush=True)
        with contextlib.suppress(Exception):
            self.send("internal", error=f"{type(exc).__name__}: {exc}", traceback=text[-4000:])

    # ------------------------------------------------------------------ the end

    def at_exit(self) -> None:
        """At the interpreter's exit: close what is open and tell the run process how the script ended."""
        if self.dead:
            return
        exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)  # an uncaught exception
        obs = self.obs
        try:
            obs.finish(exc)
        except Exception as err:  # noqa: BLE001 - the exit message still goes out
            print(f"cockpit probe: closing the phases failed: {err!r}", file=sys.stderr)
        info = None
        if exc is not None:
            info = {
                "type": type(exc).__name__,
                "message": str(exc)[:500],
                "frame": user_frame(exc),
                "remedy": blame.of(exc).remedy,  # the state the script left (a graph kept across batches), if that
                "oom": is_oom(exc),
                "injected": bool(getattr(exc, "_cockpit_injected", False)),
            }
        ours = exc is not None and not isinstance(exc, ProbeStop) and not getattr(exc, "_cockpit_injected", False)
        if exc is not None and ours and cockpit_raised(exc):
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            with contextlib.suppress(Exception):
                self.send("internal", error=f"{type(exc).__name__}: {exc}", traceback=text[-4000:])
            return
        how = "diverged" if obs.diverged else "stopped" if obs.stop_reason else "exception" if exc else "ended"
        mem = None
        if obs.cfg.mode == "resume":
            from .reading import read_peak_rss

            mem = obs.meter.read()
            peak = read_peak_rss()
            if peak is not None:
                mem["rss_peak"] = max(int(mem.get("rss_peak") or 0), peak)
        with contextlib.suppress(Exception):
            self.send(
                "exit",
                how=how,
                reason=obs.stop_reason,
                exception=info,
                diverged=obs.diverged,
                step=obs.step,
                phase=obs.open.name if obs.open is not None else None,
                loaded=obs.loaded[-200:],
                saves=obs.saves[-50:],
                mem=mem,
                seconds=__import__("time").perf_counter() - obs.t_start,
            )


def _same(a: object, b: object) -> bool:
    return a is b


def _arg(args: tuple[object, ...], kwargs: Mapping[str, object], index: int) -> object:
    """The file argument of a save or load call: by position, else by its usual keyword names."""
    if len(args) > index:
        return args[index]
    return next((kwargs[k] for k in ("f", "filename", "path") if k in kwargs), None)


class _AfterImport:
    """A meta-path finder: lets a module import as usual, then calls ``patch(module)`` once."""

    def __init__(self, name: str, patch: Callable[[Any], None]):
        self.name, self.patch, self.busy = name, patch, False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name or self.busy:
            return None
        import importlib.util

        self.busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy = False
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self)
            self.patch(module)

        loader.exec_module = exec_module
        return spec


def _die_with_parent() -> None:
    """Linux: the kernel kills this process when the one that started it ends (the run process, or a shell)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def start() -> Instrument | None:
    """Called once, right after the script imported torch, when the environment asks for a probe."""
    global _current
    if _current is not None:
        return _current
    raw = os.environ.get(ch.CONFIG_ENV, "")
    cfg = Config.of(json.loads(raw)) if raw else Config()
    fd = int(os.environ[ch.FD_ENV])
    pipe = ch.Channel(fd)
    with contextlib.suppress(OSError):
        os.set_inheritable(fd, False)  # programs the script starts do not hold the pipe open
    if cfg.runner and os.getppid() == cfg.runner:
        _die_with_parent()
    obs = Observer(cfg, pipe.send, os.environ.get("COCKPIT_INJECT", ""))
    inst = Instrument(obs, pipe.send, lambda: pipe.broken)
    pipe.send("hello", pid=os.getpid(), ppid=os.getppid(), python=sys.executable, argv=sys.argv[:50], mode=cfg.mode)
    inst.install()
    atexit.register(inst.at_exit)
    _current = inst
    return inst
