"""Chaos test of a whole series (issue 37): random kills, a full disk, clock steps and notebook edits at once.

A series of 3 variants x 3 seeds of the demo task (shrunk to a few seconds a run) runs on the CPU while,
at random moments drawn from one seed, the bench:

- ``kill_run``     SIGKILLs a run's process group (a ``cockpit.pilot`` of this bench's campaign only);
- ``kill_series``  SIGKILLs the series' own process (``cockpit series``), then starts it again the way a
                   user would: ``cockpit series --resume`` when a run can go on from a checkpoint, else
                   ``cockpit series --skip-done`` for what is left;
- ``kill_tui``     SIGKILLs the TUI (``cockpit tui``, headless) watching the campaign;
- ``disk_full``    fills the size-limited folder (a tmpfs, made and removed by the bench) that holds the
                   campaign and its ``runs/``, for a moment;
- ``clock_step``   steps the wall clock of every Cockpit process the bench starts, forward or back (the real
                   clock is the machine's and is never touched: a ``sitecustomize`` on their PYTHONPATH adds
                   an offset, read from a file, to ``time.time()`` and ``time.time_ns()``);
- ``edit``         edits the notebook from a second process (decisions, observations, verdicts, the
                   conclusion, and saves of a notebook read a moment before) through Cockpit's notebook API.

Then the faults stop, the disk is freed and ``cockpit series --resume`` (and ``--skip-done`` for runs that
had no checkpoint) finishes the series. A round passes when:

- every variant x seed has exactly one ``completed`` training run in the notebook, and every other row of
  it ended (no ``created`` or ``running`` row) with its reason;
- each completed run's curve.csv (every column but the elapsed time) and evals.csv are byte for byte those of
  the same variant x seed in a reference series run undisturbed by the same bench;
- no temporary file (``.*.tmp``: atomic writers', disk reserves, half-made run folders) is left, and
  every run folder has its row and every row its folder;
- every notebook edit that reported success is in the notebook, and every other one was refused with a
  message;
- a sentinel process of the bench's own, started before the chaos, is alive and received no signal; every
  process signalled carried this bench's token in its environment.

With ``--ray`` the series goes to a Ray cluster of three nodes on this machine (a head and two workers, each a
``ray start`` of the bench's own, stopped process by process at the end), and one more fault is played:

- ``kill_node``    a box lost: every process of a worker node (one training a run, when one does) SIGKILLed at
                   once, then a new worker joined in its place, as a user renting another box would.

``kill_run`` then kills a run's process on its node, and ``kill_series`` the series' command while the series'
keeper on the head holds its runs (the command started again follows them). The disk and the clock are left
alone there (Ray's node processes are started before the round, beyond the clock shim and the head's tmpfs).
Each completed run's node-local copy must also be gone (``remote.json``: ``node_copy = "removed"``).

    sudo .venv/bin/python bench/chaos_series.py                       # 200 faults, a random seed (printed)
    .venv/bin/python bench/chaos_series.py --ray --faults 40 --updates 150  # on a local Ray cluster
    sudo .venv/bin/python bench/chaos_series.py --seed 7 --faults 40  # replay a seed's fault schedule

The seed fixes the schedule (which fault, when, with which parameters); the processes' own timing does not
repeat exactly, so a replay plays the same faults at the same moments, not the same interleaving. Root is
needed for the tmpfs (``mount -t tmpfs``); without it the disk is not filled and the bench says so.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

VARIANTS = ("lr1e-4", "lr5e-5", "lr2e-4")
SEEDS = (0, 1, 2)
KINDS = ("kill_run", "kill_series", "kill_tui", "disk_full", "clock_step", "edit", "kill_node")
WEIGHTS = {"kill_run": 5, "kill_series": 2, "kill_tui": 2, "disk_full": 1, "clock_step": 1, "edit": 3, "kill_node": 2}
# On a Ray cluster (--ray): the disk and the clock are left alone (the nodes' processes are Ray's, started before
# the round, so neither the clock shim nor the head's tmpfs reaches them alike), and nodes are lost instead
RAY_KINDS = ("kill_run", "kill_series", "kill_tui", "edit", "kill_node")
REASON = "chaos bench: no pilot, the series is what is tested"
AGAIN = "chaos bench: a disk filled on purpose"
TOKEN_ENV = "COCKPIT_CHAOS_TOKEN"
CLOCK_ENV = "COCKPIT_CHAOS_CLOCK_FILE"

CLOCK_SHIM = '''"""Written by bench/chaos_series.py: a wall clock the bench can step (real clock untouched)."""
import os as _os
import time as _time

_file = _os.environ.get("COCKPIT_CHAOS_CLOCK_FILE")
if _file:
    _real_time, _real_ns, _mono = _time.time, _time.time_ns, _time.monotonic
    _seen = [0.0, -1.0]  # the offset, and when it was last read

    def _offset():
        t = _mono()
        if t - _seen[1] > 0.05:
            _seen[1] = t
            try:
                with open(_file) as fh:
                    _seen[0] = float(fh.read() or 0)
            except (OSError, ValueError):
                pass
        return _seen[0]

    def time():  # noqa: D103
        return _real_time() + _offset()

    def time_ns():  # noqa: D103
        return _real_ns() + int(_offset() * 1e9)

    _time.time = time
    _time.time_ns = time_ns
'''


# --------------------------------------------------------------------------- helpers run as their own processes


def sentinel_main(log: str) -> int:
    """A process of the bench's own that records every catchable signal it receives (none may arrive)."""

    def note(signum: int, frame: object) -> None:
        with open(log, "a") as fh:
            fh.write(f"{signum}\n")

    for s in signal.valid_signals():
        if s in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD, signal.SIGWINCH):
            continue
        try:
            signal.signal(s, note)
        except (OSError, ValueError, RuntimeError):
            pass
    while True:
        time.sleep(3600)


def editor_main(campaign: str) -> int:
    """The second process that edits the notebook: one JSON command a line on stdin, one answer a line out."""
    from cockpit import notebook as nbm
    from cockpit.tui import notebookedits as edits

    path = nbm.find(campaign)
    for line in sys.stdin:
        cmd = json.loads(line)
        op, token = cmd["op"], cmd["token"]
        answer: dict[str, object] = {"op": op, "token": token}
        try:
            if op in ("decision", "observation"):
                nb = nbm.load(path)
                rid = [r.id for r in nb.runs][-1:] if op == "observation" else []
                msg = edits.add_note(path, nb.digest, op, f"{op} {token}", rid).message
            elif op == "verdict":
                nb = nbm.load(path)
                if not nb.runs:
                    answer.update(ok=False, skipped=True, message="no run yet")
                    print(json.dumps(answer), flush=True)
                    continue
                row = random.Random(token).choice(nb.runs)
                answer["run"] = row.id
                msg = edits.set_verdict(path, row.id, row.verdict, token).message
            elif op == "conclusion":
                nb = nbm.load(path)
                msg = edits.set_conclusion(path, nb.conclusion, f"conclusion {token}", "").message
            elif op == "stale_save":  # a notebook read a moment ago, saved whole: refused if anything wrote since
                nb = nbm.load(path)
                time.sleep(float(cmd.get("wait", 0.0)))
                nb.decisions.append(nbm.Decision(date="2026-01-01", text=f"stale_save {token}", kind="decision"))
                nbm.save(nb)
                msg = "saved"
            else:
                raise ValueError(op)
            answer.update(ok=True, message=msg)
        except (nbm.ConflictError, nbm.NotebookError) as exc:
            answer.update(ok=False, message=str(exc))
        except Exception as exc:  # noqa: BLE001 - reported to the bench, which counts it as a failure
            import traceback

            answer.update(ok=False, crash=True, message=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        print(json.dumps(answer), flush=True)
    return 0


# --------------------------------------------------------------------------- the campaign


def make_campaign(folder: Path, updates: int) -> Path:
    from cockpit import notebook as nbm

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "cockpit" / "templates" / "demo.toml", folder / "campaign.toml")

    def shrink(nb: nbm.Notebook) -> None:
        nb.task.params.update(
            {
                "d_model": 16,
                "n_layers": 1,
                "n_heads": 2,
                "dropout": 0.1,
                "train_examples": 320,
                "val_examples": 32,
                "test_examples": 32,
            }
        )
        nb.batch.updates = updates
        nb.batch.microbatch = 2
        nb.batch.accumulation = 2
        nb.validation.every_updates = max(1, updates // 4)
        nb.training.device = "cpu"
        nb.checkpoints.every_updates = max(1, updates // 10)
        nb.checkpoints.every_minutes = 0.0
        nb.checkpoints.keep = 2
        nb.stop.patience = 1000
        nb.stop.wall_clock_minutes = 30.0
        nb.runs = []
        nb.decisions = []

    nbm.mutate(folder, shrink)
    return folder


def curve_of(rdir: Path) -> tuple[list[list[str]], str]:
    """curve.csv without its elapsed time (a wall figure), and evals.csv as written."""
    with open(rdir / "curve.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    head = rows[0] if rows else []
    drop = head.index("elapsed_s") if "elapsed_s" in head else None
    curve = [[c for i, c in enumerate(r) if i != drop] for r in rows]
    return curve, (rdir / "evals.csv").read_text()


# --------------------------------------------------------------------------- the chaos


@dataclass
class Round:
    camp: Path
    rng: random.Random
    env: dict[str, str]
    token: str
    clock_file: Path
    mounted: bool
    log: Path
    series: subprocess.Popen[bytes] | None = None
    series_mode: str = ""
    tui: subprocess.Popen[bytes] | None = None
    editor: subprocess.Popen[str] | None = None
    ballast: Path | None = None
    ballast_until: float = 0.0
    offset: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    edits: list[dict[str, object]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    signalled: list[tuple[int, str]] = field(default_factory=list)
    series_starts: Counter[str] = field(default_factory=Counter)
    cluster: Any = None  # tests.integration.ray_cluster.LocalCluster with --ray: the series goes to it
    nodes_added: int = 0


def cockpit_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "cockpit", *args]


def popen(rd: Round, argv: list[str], **kw: object) -> subprocess.Popen[bytes]:
    log = open(rd.log, "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(  # type: ignore[call-overload]
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=rd.env,
            cwd=str(rd.camp.parent),
            start_new_session=True,
            **kw,
        )
    finally:
        log.close()


def ours(pid: int, token: str) -> bool | None:
    """Whether a process carries this bench's token in its environment: only such processes are signalled. None
    when it is gone: exited, or a zombie (its environment reads empty), as a run that ended between the look that
    chose it and the signal is (a race of the bench's own, not a stranger's process)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read().split(b"\0")
        if env == [b""]:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[-1].split()[0] in (b"Z", b"X"):
                    return None
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:
        return False
    return f"{TOKEN_ENV}={token}".encode() in env


def kill_group(rd: Round, pid: int, what: str, child: bool = False) -> bool:
    """SIGKILL a process (its group when it leads one) that this bench started: a child it holds the handle of
    (``child``: its pid cannot be recycled before the bench reaps it), or one carrying the bench's token."""
    mine = True if child else ours(pid, rd.token)
    if mine is None:  # ended before the signal: nothing to kill
        return False
    if not mine:
        rd.problems.append(f"refused to signal pid {pid} ({what}): not started by this bench")
        return False
    try:
        pgid = os.getpgid(pid)
        if pgid == pid:
            os.killpg(pgid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    rd.signalled.append((pid, what))
    return True


def live_runs(rd: Round) -> list[tuple[str, int]]:
    from cockpit import runs

    if rd.cluster is not None:
        return node_runs(rd)
    out = []
    for rdir in runs.run_dirs(rd.camp):
        proc = runs.owned(rdir, wait_s=0.0)
        if proc is not None:
            out.append((rdir.name, int(proc.pid)))
    return out


def node_runs(rd: Round) -> list[tuple[str, int]]:
    """The run processes of this round's campaign on the cluster's nodes (each in a node-local copy named
    ``<campaign>-<run id>-<token>`` under its node's Ray session folder)."""
    import psutil

    key = f"/cockpit/{rd.camp.name}-r"
    # this cluster's nodes only: a second bench on the machine (two CI runs at once, the same seed) names its
    # campaign alike, and its runs, which carry its own token, were taken for this one's and refused
    roots = [str(n.temp) for n in rd.cluster.nodes]
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        mine = any(r in cmd for r in roots)
        if "cockpit.pilot" in cmd and key in cmd and mine and p.pid == _leader(p.pid):
            rid = cmd.split(key, 1)[1].split("-", 1)[0]
            out.append((f"r{rid}", int(p.pid)))
    return out


def _leader(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return -1


def kill_node(rd: Round) -> bool:
    """A box lost: every process of a worker node SIGKILLed at once (one training a run, if any does), then a
    new box joined in its place, as a user renting another one would."""
    # never one already lost (a process of it may still be exiting): its kill would not take a node away
    workers = [n for n in rd.cluster.nodes if n.name != "head" and not n.lost and n.processes()]
    if not workers:
        return False
    busy = {str(p) for _, pid in node_runs(rd) for p in _cmdline(pid)}
    hosting = [n for n in workers if any(str(n.temp) in c for c in busy)]
    node = rd.rng.choice(hosting or workers)
    procs = node.processes()
    # the node's own processes name its temp dir (made by this bench) and carry the bench's token; the rest are
    # their descendants (Ray's agents and workers, whose command lines Ray rewrites)
    for p in procs:
        if str(node.temp) in " ".join(_cmdline(p.pid)) and ours(p.pid, rd.token) is False:
            rd.problems.append(f"refused to signal pid {p.pid} (node {node.name}): not started by this bench")
            return False
    node.kill()
    rd.signalled.extend((p.pid, f"node {node.name}") for p in procs)
    rd.nodes_added += 1
    name = f"{node.name.rstrip('0123456789')}{rd.nodes_added}"
    try:
        rd.cluster.add(name, 0, "")
    except RuntimeError as exc:  # the new box did not join (a GCS too busy to answer under load): the series
        # goes on with the nodes it has, as a user's would; what was started of the node is stopped at the end
        for n in rd.cluster.nodes:
            if n.name == name:
                n.lost = True
        with open(rd.log, "a") as fh:
            fh.write(f"\n=== bench: the replacement node {name} did not join: {str(exc)[-300:]}\n")
    return True


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def series_alive(rd: Round) -> bool:
    return rd.series is not None and rd.series.poll() is None


def start_series(rd: Round, mode: str) -> None:
    args = [str(rd.camp), *(["--ray", rd.cluster.address] if rd.cluster is not None else ["--parallel", "3"])]
    if mode == "resume":
        args += ["--resume"]
    else:
        args += ["--variants", ",".join(VARIANTS), "--seeds", ",".join(map(str, SEEDS))]
        args += ["--without-pilot", REASON, "--again", AGAIN]
        if mode == "skip-done":
            args += ["--skip-done"]
    with open(rd.log, "a") as fh:
        fh.write(f"\n=== bench: cockpit series {' '.join(args)}\n")
    rd.series = popen(rd, cockpit_cmd("series", *args))
    rd.series_mode = mode
    rd.series_starts[mode] += 1


def next_mode(rd: Round) -> str:
    """What a user runs after the series' process died: ``resume`` for runs that can go on from a checkpoint,
    ``skip-done`` for the items left with no run going on, "" to wait for the runs still going on."""
    from cockpit import notebook as nbm
    from cockpit import runs
    from cockpit import series as sr

    try:
        nb = nbm.load(rd.camp)
        if sr.resumable(nb):
            return "resume"
        rows = runs.view(nb)
    except Exception:  # noqa: BLE001 - a notebook being written: ask again on the next turn
        return ""
    covered = {
        (r.variant, r.seed) for r in rows if r.kind == "train" and r.status in ("completed", "running", "created")
    }
    return "skip-done" if any((v, s) not in covered for v in VARIANTS for s in SEEDS) else ""


def restart_series(rd: Round) -> None:
    mode = next_mode(rd)
    if mode:
        start_series(rd, mode)


def fill_disk(rd: Round) -> bool:
    if not rd.mounted or rd.ballast is not None:
        return False
    st = os.statvfs(rd.camp)
    free = st.f_bavail * st.f_frsize
    leave = rd.rng.choice([0, 4096, 64 << 10, 300 << 10])
    rd.ballast = rd.camp / ".chaos-ballast"
    chunk = b"\0" * (1 << 20)
    left = max(0, free - leave)
    try:
        fd = os.open(rd.ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError:
        return True  # the disk is full already
    try:
        while left > 0:
            left -= os.write(fd, chunk[: min(left, len(chunk))])
    except OSError:
        pass  # full: what was asked for
    finally:
        os.close(fd)
    rd.ballast_until = time.monotonic() + rd.rng.uniform(0.3, 3.0)
    return True


def free_disk(rd: Round) -> None:
    if rd.ballast is not None:
        rd.ballast.unlink(missing_ok=True)
        rd.ballast = None


def step_clock(rd: Round) -> None:
    step = rd.rng.choice([rd.rng.uniform(60, 7200), -rd.rng.uniform(60, 3600), rd.rng.uniform(1, 30)])
    rd.offset += step
    tmp = rd.clock_file.with_suffix(".new")
    tmp.write_text(repr(rd.offset))
    os.replace(tmp, rd.clock_file)


def edit(rd: Round, n: int) -> None:
    if rd.editor is None or rd.editor.poll() is not None:
        rd.editor = subprocess.Popen(  # noqa: S603
            [sys.executable, __file__, "--editor", str(rd.camp)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(rd.log, "ab"),  # noqa: SIM115
            env=rd.env,
            text=True,
            start_new_session=True,
        )
    op = rd.rng.choice(["decision", "observation", "verdict", "conclusion", "stale_save", "stale_save"])
    cmd = {"op": op, "token": f"e{n:05d}-{rd.rng.randrange(1 << 30):08x}", "wait": rd.rng.uniform(0, 0.3)}
    assert rd.editor.stdin is not None and rd.editor.stdout is not None
    rd.editor.stdin.write(json.dumps(cmd) + "\n")
    rd.editor.stdin.flush()
    line = rd.editor.stdout.readline()
    if not line:
        rd.problems.append(f"edit {cmd['token']}: the editor ended without an answer")
        return
    answer = json.loads(line)
    if answer.get("crash"):
        rd.problems.append(f"edit {cmd['token']} ({op}) neither kept nor refused: {answer['message']}")
    elif not answer.get("ok") and not str(answer.get("message", "")).strip():
        rd.problems.append(f"edit {cmd['token']} ({op}) refused without a message")
    rd.edits.append(answer)


def start_tui(rd: Round) -> None:
    code = f"from cockpit.tui.app import main; main({str(rd.camp)!r}, headless=True)"
    rd.tui = popen(rd, [sys.executable, "-c", code])


def fault(rd: Round, kind: str, n: int) -> bool:
    """Play one fault; False when it did not apply now (nothing to kill)."""
    if kind == "kill_run":
        live = live_runs(rd)
        if not live:
            return False
        rid, pid = rd.rng.choice(sorted(live))
        return kill_group(rd, pid, f"run {rid}")
    if kind == "kill_series":
        if not series_alive(rd):
            return False
        assert rd.series is not None
        ok = kill_group(rd, rd.series.pid, f"series ({rd.series_mode})", child=True)
        rd.series.wait()
        return ok
    if kind == "kill_tui":
        if rd.tui is None or rd.tui.poll() is not None:
            start_tui(rd)  # watched from now on; killed by a later fault
            return False
        ok = kill_group(rd, rd.tui.pid, "tui", child=True)
        rd.tui.wait()
        rd.tui = None
        return ok
    if kind == "disk_full":
        return fill_disk(rd)
    if kind == "clock_step":
        step_clock(rd)
        return True
    if kind == "edit":
        edit(rd, n)
        return True
    if kind == "kill_node":
        return kill_node(rd)
    raise ValueError(kind)


# --------------------------------------------------------------------------- checks


def settled(rd: Round) -> bool:
    """Every variant x seed has a completed run, and no run or series process is left."""
    from cockpit import notebook as nbm

    if series_alive(rd) or live_runs(rd):
        return False
    try:
        nb = nbm.load(rd.camp)
    except Exception:  # noqa: BLE001
        return False
    done = {(r.variant, r.seed) for r in nb.runs if r.kind == "train" and r.status == "completed"}
    return all((v, s) in done for v in VARIANTS for s in SEEDS)


def check(rd: Round, reference: dict[tuple[str, int], tuple[list[list[str]], str]]) -> list[str]:
    from cockpit import notebook as nbm
    from cockpit import runs

    bad = list(rd.problems)
    nb = nbm.load(rd.camp)
    rows = [r for r in nb.runs if r.kind == "train"]
    for v in VARIANTS:
        for s in SEEDS:
            done = [r for r in rows if (r.variant, r.seed) == (v, s) and r.status == "completed"]
            if len(done) != 1:
                bad.append(f"{v} seed {s}: {len(done)} completed runs ({', '.join(r.id for r in done) or 'none'})")
            for r in done:
                rdir = runs.run_dir(rd.camp, r.id)
                try:
                    got = curve_of(rdir)
                except OSError as exc:
                    bad.append(f"{r.id} ({v} seed {s}): completed but its curve cannot be read: {exc}")
                    continue
                want = reference[(v, s)]
                if got[0] != want[0]:
                    first = next(
                        (i for i, (a, b) in enumerate(zip(got[0], want[0], strict=False)) if a != b),
                        min(len(got[0]), len(want[0])),
                    )
                    bad.append(f"{r.id} ({v} seed {s}): curve.csv differs from the undisturbed run at row {first}")
                if got[1] != want[1]:
                    bad.append(f"{r.id} ({v} seed {s}): evals.csv differs from the undisturbed run")
    for r in nb.runs:
        if r.status in ("created", "running"):
            bad.append(f"{r.id}: still {r.status} in the notebook after every process ended")
        elif r.status != "completed" and not r.stop_reason:
            bad.append(f"{r.id}: {r.status} without a reason")
    ids = {r.id for r in nb.runs}
    folders = {p.name for p in (rd.camp / "runs").iterdir()} if (rd.camp / "runs").is_dir() else set()
    for name in sorted(folders - ids):
        bad.append(f"runs/{name}: a folder without a notebook row")
    for rid in sorted(ids - folders):
        bad.append(f"{rid}: a row without its run folder")
    for p in sorted(rd.camp.rglob("*")):
        rel = p.relative_to(rd.camp)
        if p.name.endswith(".tmp") or p.name.endswith(".partial"):
            bad.append(f"{rel}: a temporary file left behind")
        elif p.name == runs.STOP_FILE or (p.name == runs.REMOTE_FILE and rd.cluster is None):
            bad.append(f"{rel}: left behind")  # on Ray, remote.json is the run's record: where it trained
    if rd.cluster is not None:
        for r in rows:
            if r.status != "completed":
                continue
            info = runs.remote_info(runs.run_dir(rd.camp, r.id)) or {}
            if info.get("node_copy") != "removed" or Path(str(info.get("node_dir", "/nonexistent"))).exists():
                bad.append(f"{r.id}: its node-local copy is {info.get('node_copy', 'not accounted for')!r}")
    texts = {d.text for d in nb.decisions}
    last_verdict: dict[str, str] = {}
    conclusion = None
    for e in rd.edits:
        if not e.get("ok"):
            continue
        op, token = e["op"], str(e["token"])
        if op in ("decision", "observation", "stale_save"):
            if f"{op} {token}" not in texts:
                bad.append(f"edit {token} ({op}) reported saved but is not in the notebook")
        elif op == "verdict":
            last_verdict[str(e["run"])] = token
        elif op == "conclusion":
            conclusion = f"conclusion {token}"
    for rid, token in last_verdict.items():
        got_v = next((r.verdict for r in nb.runs if r.id == rid), None)
        if got_v != token:
            bad.append(f"edit {token}: the verdict of {rid} is {got_v!r}, not the last one saved")
    if conclusion is not None and nb.conclusion.text != conclusion:
        bad.append(f"the conclusion is {nb.conclusion.text!r}, not the last one saved ({conclusion!r})")
    return bad


# --------------------------------------------------------------------------- one round, the bench


def play_round(
    rd: Round, n_faults: int, reference: dict[tuple[str, int], tuple[list[list[str]], str]], first: int
) -> list[str]:
    start_series(rd, "plan")
    start_tui(rd)
    played = 0
    attempts = 0
    pause = (0.1, 1.2)
    if rd.cluster is not None:  # Ray takes seconds to place the first runs: the faults start once one trains
        until = time.monotonic() + 180
        while not node_runs(rd) and time.monotonic() < until and series_alive(rd):
            time.sleep(0.2)
        pause = (0.5, 3.0)  # a run on Ray starts in seconds, not at once: faults spread over its life
    deadline = time.monotonic() + 600
    while played < n_faults and time.monotonic() < deadline:
        time.sleep(rd.rng.uniform(*pause))
        if rd.ballast is not None and time.monotonic() >= rd.ballast_until:
            free_disk(rd)
        if not series_alive(rd) and not settled(rd):
            restart_series(rd)
        if settled(rd):
            break  # the series finished before every fault of the round was played
        kinds = RAY_KINDS if rd.cluster is not None else KINDS[:-1]
        kind = rd.rng.choices(kinds, weights=[WEIGHTS[k] for k in kinds])[0]
        attempts += 1
        if fault(rd, kind, first + played):
            rd.faults[kind] += 1
            played += 1
    # the chaos is over: free the disk, let the series finish the way a user would
    free_disk(rd)
    if rd.tui is not None and rd.tui.poll() is None:
        kill_group(rd, rd.tui.pid, "tui at the end of the round", child=True)
        rd.tui.wait()
    deadline = time.monotonic() + 300
    while not settled(rd) and time.monotonic() < deadline:
        if not series_alive(rd):
            restart_series(rd)
        time.sleep(0.5)
    if rd.series is not None:
        rd.series.wait()
    if rd.editor is not None:
        assert rd.editor.stdin is not None
        rd.editor.stdin.close()
        rd.editor.wait()
    if not settled(rd):
        return [*rd.problems, "the series did not finish within 5 minutes of the last fault"]
    return check(rd, reference)


def refusals(rd: Round) -> str:
    """The edits refused, by why (each refusal came with its message)."""
    why: Counter[str] = Counter()
    for e in rd.edits:
        if not e.get("ok") and not e.get("skipped"):
            msg = str(e.get("message", ""))
            why["disk full" if "disk full" in msg else "changed on disk" if "changed on disk" in msg else "other"] += 1
    return "".join(f", {n} refused: {k}" for k, n in sorted(why.items()))


def end_round(rd: Round) -> None:
    """Whatever happened, the round leaves no process of its own and no ballast behind."""
    free_disk(rd)
    for proc, what in ((rd.tui, "tui"), (rd.series, "series")):
        if proc is not None and proc.poll() is None:
            kill_group(rd, proc.pid, f"{what} at the end of the round", child=True)
            proc.wait()
    if rd.editor is not None and rd.editor.poll() is None:
        rd.editor.kill()
        rd.editor.wait()
    for rid, pid in live_runs(rd):
        kill_group(rd, pid, f"run {rid} at the end of the round")


def reference_series(
    root: Path, updates: int, env: dict[str, str]
) -> dict[tuple[str, int], tuple[list[list[str]], str]]:
    from cockpit import notebook as nbm
    from cockpit import runs

    camp = make_campaign(root / "reference", updates)
    argv = ["series", str(camp), "--variants", ",".join(VARIANTS), "--seeds", ",".join(map(str, SEEDS))]
    argv += ["--parallel", "3", "--without-pilot", REASON]
    out = subprocess.run(cockpit_cmd(*argv), env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"the reference series failed ({out.returncode}):\n{out.stderr[-3000:]}")
    ref = {}
    for r in nbm.load(camp).runs:
        ref[(r.variant, r.seed)] = curve_of(runs.run_dir(camp, r.id))
    return ref


def mount(folder: Path, size_mib: int) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(folder)], capture_output=True, check=False
    )
    return done.returncode == 0


def umount(folder: Path) -> None:
    subprocess.run(["umount", str(folder)], capture_output=True, check=False)


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(143)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=None, help="the seed of the fault schedule (default: a random one)")
    p.add_argument("--faults", type=int, default=200, help="faults over the whole bench (default 200)")
    p.add_argument("--per-round", type=int, default=30, help="faults per series round at most (default 30)")
    p.add_argument("--updates", type=int, default=120, help="updates of each run (default 120)")
    p.add_argument("--disk-mib", type=int, default=48, help="size of the tmpfs holding the campaign")
    p.add_argument("--keep", action="store_true", help="keep the bench's folders (kept anyway on a failure)")
    p.add_argument(
        "--ray",
        action="store_true",
        help="the series on a Ray cluster of three nodes on this machine (a head, two workers), nodes lost too",
    )
    p.add_argument("--editor", metavar="CAMPAIGN", help=argparse.SUPPRESS)
    p.add_argument("--sentinel", metavar="LOG", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.editor:
        return editor_main(args.editor)
    if args.sentinel:
        return sentinel_main(args.sentinel)
    previous = signal.signal(signal.SIGTERM, _terminated)  # a `kill` of the bench still cleans up (finally blocks)
    seed = args.seed if args.seed is not None else secrets.randbelow(1 << 31)
    print(f"chaos seed {seed}: replay with `bench/chaos_series.py --seed {seed} --faults {args.faults}`", flush=True)
    root = Path(tempfile.mkdtemp(prefix="cockpit-chaos-"))
    token = secrets.token_hex(8)
    shim = root / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(CLOCK_SHIM)
    base_env = dict(os.environ)
    base_env["OMP_NUM_THREADS"] = "1"
    base_env[TOKEN_ENV] = token
    base_env["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), base_env.get("PYTHONPATH", "")) if x)
    sentinel_log = root / "sentinel.log"
    sentinel = subprocess.Popen(  # noqa: S603
        [sys.executable, __file__, "--sentinel", str(sentinel_log)],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        return _bench(args, seed, root, token, shim, base_env, sentinel, sentinel_log)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if sentinel.poll() is None:
            sentinel.kill()
            sentinel.wait()


def _bench(
    args: argparse.Namespace,
    seed: int,
    root: Path,
    token: str,
    shim: Path,
    base_env: dict[str, str],
    sentinel: subprocess.Popen[bytes],
    sentinel_log: Path,
) -> int:
    cluster = None
    if args.ray:
        from tests.integration.ray_cluster import LocalCluster, cluster_env

        # its own short folder: Ray's socket paths under a node's temp dir must fit in 107 bytes
        cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="cc", dir="/tmp")), {**cluster_env(), TOKEN_ENV: token})
        print(f"a Ray cluster of three nodes (a head, two workers) in {cluster.root}", flush=True)
        try:
            cluster.start([("wa", 0, ""), ("wb", 0, "")])
        except BaseException:
            cluster.stop()
            raise
    try:
        return _rounds(args, seed, root, token, shim, base_env, sentinel, sentinel_log, cluster)
    finally:
        if cluster is not None:
            cluster.stop()
            shutil.rmtree(cluster.root, ignore_errors=True)


def _rounds(
    args: argparse.Namespace,
    seed: int,
    root: Path,
    token: str,
    shim: Path,
    base_env: dict[str, str],
    sentinel: subprocess.Popen[bytes],
    sentinel_log: Path,
    cluster: Any,
) -> int:
    rng = random.Random(seed)
    t0 = time.monotonic()
    print(f"reference series (3 variants x 3 seeds, {args.updates} updates each, undisturbed) in {root}", flush=True)
    reference = reference_series(root, args.updates, base_env)
    print(f"  done in {time.monotonic() - t0:.0f} s", flush=True)
    total: Counter[str] = Counter()
    failures: list[str] = []
    played = 0
    n = 0
    mounted_any = False
    while played < args.faults:
        n += 1
        rseed = rng.randrange(1 << 31)
        folder = root / f"round{n}"
        mounted = mount(folder, args.disk_mib)
        mounted_any |= mounted
        # on Ray the campaign's name is the round's: it names the run copies on the nodes, which outlive a round
        camp = make_campaign(folder / ("camp" if cluster is None else f"camp{n}"), args.updates)
        clock_file = root / f"clock{n}"
        clock_file.write_text("0")
        env = dict(base_env)
        env[CLOCK_ENV] = str(clock_file)
        env["PYTHONPATH"] = os.pathsep.join([str(shim), env["PYTHONPATH"]])
        rd = Round(camp, random.Random(rseed), env, token, clock_file, mounted, root / f"round{n}.log", cluster=cluster)
        want = min(args.per_round, args.faults - played)
        t1 = time.monotonic()
        bad = ["the bench itself failed during the round"]
        try:
            bad = play_round(rd, want, reference, played)
        finally:
            end_round(rd)
            if mounted:
                if bad:  # keep what the round left for a look, off the tmpfs
                    shutil.copytree(camp, root / f"round{n}-camp", symlinks=True, dirs_exist_ok=True)
                umount(folder)
        played += sum(rd.faults.values())
        total.update(rd.faults)
        starts = ", ".join(f"{k} {v}" for k, v in sorted(rd.series_starts.items()))
        print(
            f"round {n} (seed {rseed}): {sum(rd.faults.values())} faults "
            f"({', '.join(f'{k} {v}' for k, v in sorted(rd.faults.items()))}); series started: {starts}; "
            f"{len(rd.edits)} edits ({sum(1 for e in rd.edits if e.get('ok'))} kept{refusals(rd)}); "
            f"{len(rd.signalled)} processes signalled, each of this bench's; "
            f"{time.monotonic() - t1:.0f} s: {'PASS' if not bad else 'FAIL'}",
            flush=True,
        )
        for b in bad:
            print(f"  - {b}", flush=True)
        if bad:
            kept = root / f"round{n}-camp" if mounted else camp
            failures.append(f"round {n} (round seed {rseed}, bench seed {seed}): {len(bad)} problems; files in {kept}")
        if sum(rd.faults.values()) == 0:
            print("  no fault could be played in this round; stopping", flush=True)
            break
    alive = sentinel.poll() is None
    signals_seen = sentinel_log.read_text().split() if sentinel_log.exists() else []
    if not alive or signals_seen:
        failures.append(f"the sentinel process was {'killed' if not alive else 'signalled'}: {signals_seen}")
    sentinel.kill()
    sentinel.wait()
    print(
        f"\n{played} faults in {n} rounds, {time.monotonic() - t0:.0f} s: "
        + ", ".join(f"{k} {total[k]}" for k in (RAY_KINDS if cluster is not None else KINDS[:-1]))
    )
    if not mounted_any:
        print("the disk was never filled: mounting a tmpfs needs root")
    print(f"sentinel process alive and never signalled: {alive and not signals_seen}")
    if failures:
        print(f"FAIL (seed {seed}):")
        for f in failures:
            print(f"  {f}")
        return 1
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    print(f"PASS (seed {seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
