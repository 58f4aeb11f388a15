"""Started by every Python interpreter whose PYTHONPATH holds this folder: ``cockpit probe`` puts it there.

It does nothing unless the environment asks for a probe (COCKPIT_PROBE) and no parent process took
the instrumentation already (COCKPIT_PROBE_CLAIMED). Then it waits for the script to import torch and
starts Cockpit's instrumentation right after (``cockpit.probe.instrument.start``), so a Python process
that never imports torch (a helper, a shell tool) is left alone and pays nothing. Whatever happens
here, the script runs: a failure is one line on stderr and a message to the run process.

Any ``sitecustomize`` this one hides (a distribution's own) is run too.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain() -> None:
    """Run the sitecustomize that would have run without this folder first on the path."""
    try:
        import importlib.machinery
        import importlib.util

        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is not None and spec.loader is not None:
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
    except Exception as exc:  # noqa: BLE001 - someone else's sitecustomize: reported, never fatal here
        print(f"cockpit probe: the interpreter's own sitecustomize failed: {exc!r}", file=sys.stderr)


class _AfterTorch:
    """A meta-path finder that lets torch import as usual, then starts the instrumentation."""

    def __init__(self) -> None:
        self.busy = False

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001 - importlib's protocol
        if name != "torch" or self.busy:
            return None
        import importlib.util

        self.busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):  # noqa: ANN001, ANN202
            run(module)
            _remove(self)
            _start()

        loader.exec_module = exec_module
        return spec


def _remove(finder: object) -> None:
    try:
        sys.meta_path.remove(finder)  # type: ignore[arg-type]
    except ValueError:
        pass


def _start() -> None:
    os.environ["COCKPIT_PROBE_CLAIMED"] = str(os.getpid())  # this process is the script; its children are not
    try:
        import importlib.util

        if importlib.util.find_spec("cockpit") is None:
            # an interpreter without Cockpit installed: its folder goes last on the path, shadowing nothing
            sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(_HERE))))
        from cockpit.probe import instrument

        instrument.start()
    except Exception as exc:  # noqa: BLE001 - the script must run even when the probe cannot
        print(f"cockpit probe: the instrumentation could not start: {type(exc).__name__}: {exc}", file=sys.stderr)
        _report(exc)


def _report(exc: BaseException) -> None:
    import json

    try:
        fd = int(os.environ.get("COCKPIT_PROBE_FD", ""))
        line = json.dumps({"msg": "internal", "error": f"the instrumentation could not start: {exc!r}"})
        os.write(fd, (line + "\n").encode())
    except (ValueError, OSError):
        pass


def _arm() -> None:
    if not os.environ.get("COCKPIT_PROBE") or os.environ.get("COCKPIT_PROBE_CLAIMED"):
        return
    if "torch" in sys.modules:  # imported by another sitecustomize or .pth file already
        _start()
    else:
        sys.meta_path.insert(0, _AfterTorch())


_chain()
_arm()
