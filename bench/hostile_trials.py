"""Adversarial trials for issue 14, items 1 to 6: how many trials, how many clean.

Each group plays one hostile case many times and counts the trials whose
outcome is the clean one:

1. identity   a planted process.json (10 ways) under launch.stop, `cockpit stop` and a series' stop:
              the unrelated process survives, the run never shows running
2. links      links planted in a run folder (8 ways) and in an archive (7 ways): never followed
3. fifo       a FIFO in place of 6 run files under runs, compare, report, inspect: no command blocks
4. notebook   every bad notebook of tests/unit/test_hostile_notebook.py under `cockpit check`, and every
              unreadable one under 12 commands: exit 2, one paragraph, no traceback
5. signals    SIGTERM at a random moment inside torch.save (checkpoint and export writes): exit 7, no
              temporary left; SIGTERM right after a run process starts: stopped; SIGTERM during a real
              pilot's save or export phase: stopped (exit 7); a real pilot whose disk fills during its
              save (root only: a tmpfs): "disk full", exit 10
6. kills      SIGKILL during a real pilot's save or export, then a writing command: no temporary left

    .venv/bin/python bench/hostile_trials.py            # everything (real pilots: several minutes)
    .venv/bin/python bench/hostile_trials.py --quick    # no real pilots
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from cockpit import events as ev  # noqa: E402
from cockpit import fsutil, launch, runs  # noqa: E402
from cockpit import notebook as nbm  # noqa: E402
from cockpit import series as sr  # noqa: E402
from cockpit.cli import main as cli  # noqa: E402

RESULTS: dict[str, list[int]] = {}


def count(group: str, ok: bool, note: str = "") -> None:
    t = RESULTS.setdefault(group, [0, 0])
    t[0] += 1
    t[1] += int(ok)
    if not ok:
        print(f"  NOT CLEAN [{group}] {note}", flush=True)


def quiet(fn: Callable[[], object]) -> object:
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        out = fn()
    quiet.err = err.getvalue()  # type: ignore[attr-defined]
    return out


def campaign(root: Path, **task_params: object) -> Path:
    from tests.fake_runs import make_campaign

    camp = make_campaign(root)
    if task_params:
        nbm.mutate(camp, lambda nb: nb.task.params.update(task_params))
    return camp


# A model whose checkpoint (with AdamW's state) is about 150 MB: its writes take long enough for a kill to land
# inside them, as it does on a real model.
BIG = {"d_model": 512, "n_layers": 4, "n_heads": 8}


# --------------------------------------------------------------------------- 1


def identity(root: Path, rounds: int) -> None:
    import psutil

    from tests.integration.test_hostile_identity import _variants

    camp = campaign(root / "identity")
    rid, rdir = runs.create_run(camp)
    stranger = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        for _ in range(rounds):
            for what, info in _variants(stranger.pid, rdir):
                for how in ("launch.stop", "cockpit stop", "series stop"):
                    (rdir / runs.PROCESS_FILE).write_text(json.dumps(info))
                    alive_before = runs.is_alive(rdir)
                    if how == "launch.stop":
                        launch.stop(rdir, grace_s=0.2)
                    elif how == "cockpit stop":
                        quiet(lambda: cli(["stop", str(camp), rid, "--grace", "0.2"]))
                    else:
                        s = sr.Series(camp, [])
                        s.started.append(sr.Started(sr.Item("lr1e-4", 0), rid, rdir, ev.Tail(rdir / ev.EVENTS_FILE)))
                        s.stop()
                    time.sleep(0.02)
                    count("1 identity", stranger.poll() is None and not alive_before, f"{what} / {how}")
        assert psutil.pid_exists(stranger.pid)
    finally:
        stranger.kill()
        stranger.wait()


# --------------------------------------------------------------------------- 2


def links(root: Path) -> None:
    from cockpit import archive as ar
    from tests.unit.test_hostile_links import CASES, _no_secret_in, exported_run

    for i, (what, plant, expect) in enumerate(CASES):
        camp, rdir, outside = exported_run(root / f"links{i}")
        plant(rdir, outside)
        out = root / f"links{i}" / "arch"
        try:
            target = ar.gather(rdir, out)
            ok = expect == "recorded" and _no_secret_in(target) and ar.verify(target).ok
        except ar.ArchiveError:
            ok = expect == "refused" and not out.exists()
        count("2 links (archive)", ok, what)
    camp, rdir, outside = exported_run(root / "verify")
    for j, name in enumerate(["../outside/secret.bin", "model/../../outside/secret.bin", "/etc/hostname", "a//b"]):
        folder = ar.gather(rdir, root / "verify" / f"a{j}")
        m = json.loads((folder / "manifest.json").read_text())
        m["files"][name] = {"sha256": "0" * 64}
        (folder / "manifest.json").write_text(json.dumps(m))
        v = ar.verify(folder)
        count("2 links (verify)", not v.ok and v.state is None, name)
    folder = ar.gather(rdir, root / "verify" / "linked")
    (folder / "model" / "model.pt").unlink()
    (folder / "model" / "model.pt").symlink_to(outside / "model.pt")
    m = json.loads((folder / "manifest.json").read_text())
    m["files"]["model/model.pt"]["sha256"] = fsutil.sha256(outside / "model.pt")
    (folder / "manifest.json").write_text(json.dumps(m))
    count("2 links (verify)", not ar.verify(folder).ok, "a link with the right hash")
    folder = ar.gather(rdir, root / "verify" / "fifo")
    (folder / "model" / "control.pt").unlink()
    os.mkfifo(folder / "model" / "control.pt")
    count("2 links (verify)", not ar.verify(folder).ok, "a fifo")
    rep = campaign(root / "report")
    (rep / "report").symlink_to(outside)
    before = sorted(os.listdir(outside))
    code = quiet(lambda: cli(["report", str(rep)]))
    count("2 links (report)", code == 2 and sorted(os.listdir(outside)) == before, "report/ links out")


# --------------------------------------------------------------------------- 3


def fifos(root: Path) -> None:
    from tests.fake_runs import series_run

    for name in ("events.jsonl", "run.toml", "metrics.json", "inspect.json", "process.json", "curve.csv"):
        camp = campaign(root / f"fifo-{name}")
        _, rdir = series_run(camp, "lr1e-4", 0, 3.7)
        rid, open_dir = runs.create_run(camp)
        for d in (rdir, open_dir):
            if (d / name).exists():
                (d / name).unlink()
            os.mkfifo(d / name)
        for argv in (["runs", str(camp)], ["compare", str(camp)], ["report", str(camp)], ["inspect", str(camp), rid]):
            box: dict[str, object] = {}
            t = threading.Thread(target=lambda a=argv, b=box: b.setdefault("code", quiet(lambda: cli(a))), daemon=True)
            t.start()
            t.join(60)
            count("3 fifo", not t.is_alive() and box.get("code") in (0, 2), f"{name} / {argv[0]}")


# --------------------------------------------------------------------------- 4


def notebooks(root: Path) -> None:
    from tests.unit.test_hostile_notebook import BAD, COMMANDS, UNREADABLE

    for i, (name, text, path) in enumerate(BAD):
        folder = root / f"nb{i}"
        folder.mkdir(parents=True)
        (folder / "campaign.toml").write_text(text)
        code = quiet(lambda f=folder: cli(["check", str(f)]))
        err = quiet.err  # type: ignore[attr-defined]
        count("4 bad values", code == 2 and path in err and "Traceback" not in err, name)
    for kind, make in UNREADABLE.items():
        if kind == "unreadable" and os.geteuid() == 0:
            continue
        camp = root / f"unreadable-{kind.replace(' ', '_')}"
        camp.mkdir()
        make(camp / "campaign.toml")
        for cmd in COMMANDS:
            argv = [cmd[0], str(camp), *[a for a in cmd[1:] if a != "CAMP"]]
            code = quiet(lambda a=argv: cli(a))
            err = quiet.err  # type: ignore[attr-defined]
            count("4 unreadable", code == 2 and "Traceback" not in err, f"{kind} / {cmd[0]}")


# --------------------------------------------------------------------------- 5 and 6


def term_in_save(root: Path, n: int) -> None:
    from tests.unit.test_hostile_faults import TERM_IN_SAVE

    rnd = random.Random(1414)
    for i in range(n):
        out = root / f"save{i}"
        out.mkdir(parents=True)
        proc = subprocess.Popen(
            [sys.executable, "-c", TERM_IN_SAVE, str(out)], stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        assert proc.stdout is not None
        proc.stdout.readline()
        time.sleep(rnd.uniform(0.05, 2.0))
        os.kill(proc.pid, signal.SIGTERM)
        last = proc.stdout.read().strip().splitlines()
        code = proc.wait(timeout=120)
        left = fsutil.temporaries(out) + fsutil.temporaries(out / "artifact")
        outcome = json.loads(last[-1]) if last else {}
        count(
            "5 SIGTERM inside torch.save",
            code == 7 and outcome.get("status") == "stopped" and not left,
            f"{outcome} {left}",
        )


def term_at_start(root: Path, n: int) -> None:
    camp = campaign(root / "start")
    rnd = random.Random(7)
    for _ in range(n):
        delay = rnd.choice([0.0, rnd.uniform(0.0, 0.5)])
        rid, rdir = runs.create_run(camp)
        pid = launch.start(rdir)
        if delay:
            time.sleep(delay)
        os.kill(pid, signal.SIGTERM)
        code = launch._children[pid].wait(timeout=120)
        st = runs.state(rdir)
        count(
            "5 SIGTERM at start",
            (code, st.status) == (7, "stopped"),
            f"delay {delay:.3f}: {code} {st.status} {st.stop_reason}",
        )


def _wait_phase(rdir: Path, phases: tuple[str, ...], timeout: float = 600) -> str | None:
    tail = ev.Tail(rdir / ev.EVENTS_FILE)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for e in tail.read_new():
            if e.get("kind") == ev.PHASE_START and e.get("phase") in phases:
                return str(e["phase"])
        if not runs.is_alive(rdir) and launch.wait(rdir, timeout=0):
            return None
        time.sleep(0.01)
    return None


def real_pilots(root: Path, n: int, sig: str) -> None:
    """Real pilots, two at a time, signalled at a random moment inside their save or export phase."""
    rnd = random.Random(99 if sig == "TERM" else 98)

    def one(i: int) -> None:
        camp = campaign(root / f"{sig}{i}", **(BIG if sig == "KILL" else {}))
        rid, rdir = launch.new_run(camp, None, 0)
        target = ("save",) if i % 2 == 0 else ("export",)
        phase = _wait_phase(rdir, target)
        time.sleep(rnd.uniform(0.0, 0.3 if sig == "TERM" else 1.0))
        if sig == "TERM":
            said = launch.stop(rdir, grace_s=120)
        else:
            info = runs.process_info(rdir) or {}
            os.killpg(int(info["pid"]), signal.SIGKILL)
            said = "killed"
        launch.wait(rdir, timeout=300)
        st = runs.state(rdir)
        if sig == "TERM":
            ok = st.status == "stopped" and (st.run_end or {}).get("exit_code") == 7
            count("5 SIGTERM in a pilot's save/export", ok, f"{target} {phase} {said}: {st.status} {st.stop_reason}")
        else:
            before = fsutil.temporaries(rdir) + fsutil.temporaries(rdir / "artifact")
            before = [p for p in before if not p.name.startswith(".disk-reserve")]  # always there after a kill
            left_mib = sum(p.stat().st_size for p in before) / 2**20
            quiet(lambda: runs.settle(camp))  # what the next writing command does
            after = fsutil.temporaries(rdir) + fsutil.temporaries(rdir / "artifact")  # the reserve included
            note = f"{target} {phase}: {st.status}, temporaries {len(before)} -> {len(after)}"
            count("6 SIGKILL in save/export, then settle", st.status == "crashed" and not after, note)
            if before:
                print(f"  (a kill left {[p.name for p in before]}, {left_mib:.0f} MiB; settle swept them)", flush=True)
                count("6 kills that left checkpoint/export temporaries", not after, f"{left_mib:.0f} MiB")

    for i in range(0, n, 2):
        ts = [threading.Thread(target=one, args=(j,)) for j in range(i, min(n, i + 2))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


def disk_full_pilot(root: Path, n: int) -> None:
    if os.geteuid() != 0:
        print("  (disk-full pilots skipped: need root for a tmpfs)")
        return
    for i in range(n):
        disk = root / f"disk{i}"
        disk.mkdir(parents=True)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)]).returncode:
            print("  (disk-full pilots skipped: mount failed)")
            return
        try:
            camp = campaign(disk)
            rid, rdir = launch.new_run(camp, None, 0)
            t_start = time.monotonic()
            phase = _wait_phase(rdir, ("save",) if i % 2 == 0 else ("export",))
            if phase is None:
                pid = int((runs.process_info(rdir) or {}).get("pid", 0))
                child = launch._children.get(pid)
                print(
                    f"  (pilot {i} ended before its save/export after {time.monotonic() - t_start:.1f} s: "
                    f"exit {child.poll() if child else '?'}, {runs.state(rdir).stop_reason})",
                    flush=True,
                )
            filler = disk / "filler"
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
            try:
                while True:  # the disk is full to the last byte while the pilot saves or exports
                    os.write(fd, b"\0" * 4096)
            except OSError:
                pass
            os.close(fd)
            launch.wait(rdir, timeout=300)
            st = runs.state(rdir)
            code = (st.run_end or {}).get("exit_code")
            ok = st.status == "error" and st.stop_reason.startswith("disk full") and code == 10
            log = (rdir / runs.LOG_FILE).read_text(errors="replace")[-1500:] if not ok else ""
            count("5 disk full in a pilot", ok, f"{phase}: {st.status} {code} {st.stop_reason[:160]}\n{log}")
            filler.unlink()
        finally:
            subprocess.run(["umount", "-l", str(disk)])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="leave out real pilots")
    p.add_argument("--pilots", type=int, default=10, help="real pilots per signal (default 10)")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cockpit-hostile-"))
    t0 = time.monotonic()
    try:
        identity(root, rounds=3)
        links(root)
        fifos(root)
        notebooks(root)
        term_in_save(root, 20)
        term_at_start(root, 20)
        if not args.quick:
            real_pilots(root, args.pilots, "TERM")
            real_pilots(root, args.pilots, "KILL")
            disk_full_pilot(root, 4)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{'group':<40} {'trials':>7} {'clean':>7}   ({time.monotonic() - t0:.0f} s)")
    for group, (trials, clean) in sorted(RESULTS.items()):
        print(f"{group:<40} {trials:>7} {clean:>7}")
    return 0 if all(t == c for t, c in RESULTS.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
