"""``cockpit series --ray``: a series spread over a real Ray cluster of three nodes on this machine.

Slow: it starts a Ray cluster (a head and two workers, each a ``ray start`` with its own temp dir, one CPU each,
with declared fake GPUs and a custom resource for their GPU model) and trains real runs on its nodes. The cluster is
stopped by the fixture, process by process, by the temp dirs it made; never a broad ``ray stop``.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install 'cockpit[ray]'): the Ray series is not tested")

from cockpit import events as ev  # noqa: E402
from cockpit import launch, runs  # noqa: E402
from cockpit import notebook as nbm  # noqa: E402
from cockpit import series as sr  # noqa: E402
from cockpit.cli import main as cli  # noqa: E402
from cockpit.runs import stored  # noqa: E402
from tests.fake_runs import gpu_stack, standard_gates, write_run  # noqa: E402
from tests.integration.ray_cluster import ROOT, LocalCluster, cluster_env  # noqa: E402
from tests.integration.test_series import tiny_campaign  # noqa: E402

# starts a Ray cluster of three nodes (a minute on 2 shared cores) and trains runs on them: minutes, not seconds
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

UPDATES = "4"
LONG = 120  # updates of the run whose node is lost: it is still training when a checkpoint has reached the head
FOLLOWED = 400  # updates of the run whose series dies: still training when the same command follows it (~40 s)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[LocalCluster]:
    # Ray puts AF_UNIX sockets under each node's temp dir, and a socket path is at most 107 bytes: under pytest's
    # tmp path (/tmp/pytest-of-root/pytest-139/popen-gw1/raycl0/head/session_<time>_<pid>/sockets/plasma_store)
    # it did not fit in CI. A short folder of the test's own, removed afterwards.
    root = Path(tempfile.mkdtemp(prefix="cr", dir="/tmp"))
    cl = LocalCluster(root, cluster_env())
    try:
        cl.start([("wa", 2, "FAKE"), ("wb", 2, "FAKE")])
        yield cl
    finally:
        cl.stop()
        import ray

        if ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def _curve(rdir: Path) -> list[tuple[str, str]]:
    with open(rdir / runs.CURVE_FILE, newline="") as fh:
        return [(r["step"], r["loss"]) for r in csv.DictReader(fh)]


def test_series_spreads_over_the_nodes_and_the_head_sees_every_run(
    ray_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camp = tiny_campaign(tmp_path, "camp")
    nbm.mutate(camp, lambda nb: setattr(nb.validation, "every_updates", 2))
    code = cli(
        [
            "series",
            str(camp),
            "--ray",
            ray_cluster.address,
            "--variants",
            "lr1e-4,lr5e-5,lr2e-4",
            "--seeds",
            "0,1",
            "--updates",
            UPDATES,
            "--without-pilot",
            "a test of the Ray series",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "on the Ray cluster at" in err and "1 CPU (no passed pilot" in err
    nb = nbm.load(camp)
    rows = [r for r in nb.runs if r.kind == "train"]
    assert sorted((r.variant, r.seed) for r in rows) == sorted(
        (v, s) for v in ("lr1e-4", "lr5e-5", "lr2e-4") for s in (0, 1)
    )  # every run in the notebook once
    assert {r.status for r in rows} == {"completed"}
    nodes = {n.name: n.temp for n in ray_cluster.nodes}
    used = set()
    for r in rows:
        rdir = runs.run_dir(camp, r.id)
        info = runs.remote_info(rdir)
        assert info is not None and info.get("ended") is True and not info.get("reason")
        assert not (rdir / runs.PROCESS_FILE).exists()  # no local pid decides a remote run's liveness
        node_dir = Path(str(info["node_dir"]))
        # The run went on in a node-local copy under that node's Ray temp dir, never in the head's folder.
        owner = [name for name, temp in nodes.items() if node_dir.is_relative_to(temp)]
        assert len(owner) == 1, node_dir
        used.add(owner[0])
        assert not node_dir.is_relative_to(camp)
        # What the head holds is what the node wrote, byte for byte: the keeper compared every file with the
        # digests the node sent at the end, and only then was the node-local copy removed.
        assert info.get("node_copy") == "removed" and not node_dir.exists(), info
        assert int(info.get("files", 0)) >= 5, info  # run.toml, events, curve, evals, metrics, the export...
        st = runs.state(rdir)
        assert st.status == "completed" and st.stop_reason.startswith("budget reached")
        assert runs.read_metrics(rdir)["updates"] == int(UPDATES)
        assert (rdir / runs.ARTIFACT_DIR).is_dir()
    assert used == set(nodes)  # one CPU per node and six runs submitted at once: every node trained
    # each node has one CPU and each run asks for one: runs never overlap on a node (a task blocked in ray.get
    # lends its CPU to another task, so a node task that waited on the keeper let a second run start beside it)
    spans: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        rdir = runs.run_dir(camp, r.id)
        where = str((runs.remote_info(rdir) or {})["node_id"])
        events = runs.read_events(rdir)
        spans.setdefault(where, []).append((float(events[0]["t"]), float(events[-1]["t"])))
    for where, got in spans.items():
        got.sort()
        overlaps = [(a, b) for a, b in zip(got, got[1:], strict=False) if b[0] < a[1]]
        assert not overlaps, f"runs overlapped on node {where[:12]}: {overlaps}"
    # the head's readers see the remote runs as local ones
    assert cli(["runs", str(camp), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert sorted((x["id"], x["status"]) for x in listed if x["kind"] == "train") == sorted(
        (r.id, "completed") for r in rows
    )
    for x in listed:  # each with the node it ran on
        info = runs.remote_info(runs.run_dir(camp, x["id"])) or {}
        assert x["node"] == f"{info['hostname']} ({str(info['node_id'])[:12]})"
    assert cli(["compare", str(camp)]) == 0
    # A remote run trains exactly as a local one: the same curve, bit for bit, on the CPU.
    first = next(r for r in rows if (r.variant, r.seed) == ("lr1e-4", 0))
    _, local = launch.new_run(
        camp,
        "lr1e-4",
        0,
        kind="train",
        overrides=sr.budget_overrides(int(UPDATES)).flat(),
        env={"OMP_NUM_THREADS": "1"},
    )
    assert launch.wait(local, timeout=300)
    assert runs.state(local).status == "completed"
    assert _curve(local) == _curve(runs.run_dir(camp, first.id))


def test_mixed_cluster_refuses_nodes_by_name_and_places_runs_by_gpu_model(
    ray_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # wc: GPUs of a model no pilot passed on; wd: the right GPU model, but another torch (its metadata says 9.9.9)
    fake = tmp_path / "faketorch" / "torch-9.9.9.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 9.9.9\n")
    (fake / "RECORD").write_text("")
    ray_cluster.add("wc", 2, "OTHER")
    ray_cluster.add("wd", 2, "FAKE", env=cluster_env([fake.parent]))
    camp = tiny_campaign(tmp_path, "mixed")
    # A passed pilot on the FAKE GPU model (fabricated: this machine has no GPU): 30,000 MiB peak + a CUDA context
    # fit twice in 81,920 MiB, so each run asks Ray for half a FAKE GPU.
    write_run(camp, variant="lr1e-4", stack=gpu_stack("NVIDIA FAKE", 81_920), gates=standard_gates(30_000, 30_000))
    args = ["series", str(camp), "--ray", ray_cluster.address, "--variants", "lr1e-4", "--seeds", "0,1"]
    code = cli([*args, "--updates", UPDATES, "--without-pilot", "a fabricated GPU pilot"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "lr1e-4: 0.5 GPU FAKE (pilot r0001: 30,000 MiB torch peak reserved + 600 MiB CUDA context, 2 per" in err
    by_name = {n.name: n for n in ray_cluster.nodes}
    wd_id = next(line for line in err.splitlines() if "torch 9.9.9 there" in line)
    assert wd_id.startswith("node ") and "not used: torch 9.9.9 there, " in wd_id
    assert "its GPUs (gpu_model:OTHER) have no passed pilot in this series (pilots passed on: FAKE)" in err
    trained = [r for r in nbm.load(camp).runs if r.kind == "train"]
    assert len(trained) == 2 and {r.status for r in trained} == {"completed"}
    for r in trained:
        node_dir = Path(str((runs.remote_info(runs.run_dir(camp, r.id)) or {})["node_dir"]))
        where = [name for name, n in by_name.items() if node_dir.is_relative_to(n.temp)]
        assert where and where[0] in ("wa", "wb"), (r.id, node_dir)  # never the head (no GPU), wc or wd

    # a pilot on a GPU model no node has: refused before any run is created
    other = tiny_campaign(tmp_path, "h200")
    write_run(other, variant="lr1e-4", stack=gpu_stack("NVIDIA H200", 143_771), gates=standard_gates(30_000, 30_000))
    code = cli(["series", str(other), "--ray", ray_cluster.address, "--variants", "lr1e-4", "--seeds", "0"])
    err = capsys.readouterr().err
    assert code != 0
    assert "no usable node of the cluster can hold a run of lr1e-4, which asks for" in err and "gpu_model:H200" in err
    assert [r.kind for r in nbm.load(other).runs] == ["pilot"]


def test_stop_of_one_remote_run_stops_that_task_and_nothing_else(
    ray_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camp = tiny_campaign(tmp_path, "stopping")
    nbm.mutate(camp, lambda nb: setattr(nb.validation, "every_updates", 10))
    env = {**cluster_env(), "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "cockpit", "series", str(camp), "--ray", ray_cluster.address, "--variants", "lr1e-4"]
    args += ["--seeds", "0,1", "--updates", "100", "--without-pilot", "a test of stop"]  # long: the stop lands mid-run
    series = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        rdirs: list[Path] = []
        deadline = time.monotonic() + 300
        # the first run to have trained an update on its node, as the head sees it (its events relayed through Ray)
        while time.monotonic() < deadline:
            rdirs = runs.run_dirs(camp)
            moving = [d for d in rdirs if runs.summary(d).counts.get(ev.STEP, 0) > 0]
            if moving:
                break
            time.sleep(0.5)
        assert moving, "no remote run reached its first update"
        victim = moving[0]
        node_dir = str((runs.remote_info(victim) or {})["node_dir"])
        assert cli(["stop", str(camp), victim.name, "--grace", "20"]) == 0
        said = capsys.readouterr().out
        assert f"{victim.name}: stopped (its Ray task on node " in said, said
        out, _ = series.communicate(timeout=400)
    finally:
        if series.poll() is None:
            series.kill()
    st = runs.state(victim)
    assert st.status == "stopped" and st.stop_reason.startswith("stopped by signal"), st.stop_reason
    assert any(e.get("kind") == ev.RUN_END for e in runs.read_events(victim))  # its end came back to the head
    # its process on the node is gone; the other run went on and completed, never signalled
    assert not [p for p in psutil.process_iter(["cmdline"]) if node_dir in " ".join(p.info["cmdline"] or [])]
    other = next(d for d in runs.run_dirs(camp) if d != victim)
    assert runs.state(other).status == "completed", out
    assert {r.id: r.status for r in nbm.load(camp).runs} == {victim.name: "stopped", other.name: "completed"}


@pytest.mark.parametrize("storage", [False, True], ids=["streamed", "storage"])
def test_a_lost_node_crashes_its_run_and_resume_goes_on_elsewhere_with_the_same_curve(
    ray_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], storage: bool
) -> None:
    """Its checkpoints streamed back to the head, or (``[cluster] storage``) kept in a folder every node reaches:
    either way the resume goes on from the newest one, on another node, with the same curve."""
    camp = tiny_campaign(tmp_path, "lost")
    shared = tmp_path / "shared"

    def often(nb: nbm.Notebook) -> None:
        nb.validation.every_updates = 10
        nb.checkpoints.every_updates = 4
        nb.checkpoints.every_minutes = 0
        if storage:
            nb.cluster = nbm.ClusterSpec(storage=str(shared))

    nbm.mutate(camp, often)
    # a GPU pilot of the FAKE model: the run goes to a worker with FAKE GPUs, never to the head (whose loss is the cluster's)
    write_run(camp, variant="lr1e-4", stack=gpu_stack("NVIDIA FAKE", 81_920), gates=standard_gates(30_000, 30_000))
    env = {**cluster_env(), "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "cockpit", "series", str(camp), "--ray", ray_cluster.address, "--variants", "lr1e-4"]
    args += ["--seeds", "0", "--updates", str(LONG), "--without-pilot", "a test of a lost node"]
    series = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 300
        rdir = None
        while time.monotonic() < deadline:
            found = [d for d in runs.run_dirs(camp) if runs.run_meta(d).get("kind") == "train"]
            # the checkpoints rotate (keep 2): any one at update 8 or later that reached the head will do
            steps = [step for step, _, _ in stored.checkpoint_steps(found[0])] if found else []
            if steps and max(steps) >= 8:
                rdir = found[0]
                break
            time.sleep(0.3)
        assert rdir is not None, "the remote run wrote no checkpoint at update 8 or later to the head"
        assert runs.state(rdir).status == "running"  # still training: 120 updates leave the kill time enough
        if storage:  # the checkpoints are in the storage, only their records on the head
            kept = stored.stored(rdir)
            assert kept and all(Path(e["path"]).is_relative_to(shared) for e in kept.values()), kept
            assert not list((rdir / runs.CHECKPOINTS_DIR).glob("update-*.pt"))
        node_dir = Path(str((runs.remote_info(rdir) or {})["node_dir"]))
        lost = next(n for n in ray_cluster.nodes if node_dir.is_relative_to(n.temp))
        assert lost.name != "head"
        lost.kill()  # the box went away: its raylet, its workers and the run's process, all at once
        out, _ = series.communicate(timeout=300)
    finally:
        if series.poll() is None:
            series.kill()
    st = runs.state(rdir)
    assert st.status == "crashed", (st.status, st.stop_reason, out)
    assert "remote run on node " in st.stop_reason and "was lost" in st.stop_reason, st.stop_reason
    # the user rents another box: the module's later cases (and the other parameter) keep two FAKE workers
    ray_cluster.add(f"wr{len(ray_cluster.nodes)}", 2, "FAKE")
    # --resume goes on from the last checkpoint that came back to the head, on a node still there
    code = cli(["series", str(camp), "--resume", "--ray", ray_cluster.address])
    err = capsys.readouterr().err
    assert code == 0, err
    st = runs.state(rdir)
    assert st.status == "completed", st.stop_reason
    again = Path(str((runs.remote_info(rdir) or {})["node_dir"]))
    assert not again.is_relative_to(lost.temp)
    assert "from update" in nbm.load(camp).run(rdir.name).resumed
    if storage:  # a finished run is not resumed: its periodic checkpoints are gone from the storage too, those
        # the lost node wrote there past the head's records included; its final checkpoint is on the head
        assert not stored.stored(rdir) and not list(shared.rglob("update-*.pt"))
        assert (rdir / "checkpoint.pt").is_file()
        assert (runs.remote_info(rdir) or {}).get("node_copy") == "removed"
    # the same curve as an uninterrupted run of that variant and seed, on the CPU
    _, local = launch.new_run(
        camp, "lr1e-4", 0, kind="train", overrides=sr.budget_overrides(LONG).flat(), env={"OMP_NUM_THREADS": "1"}
    )
    assert launch.wait(local, timeout=400)
    assert runs.state(local).status == "completed"
    assert _curve(local) == _curve(rdir)
    assert len(_curve(rdir)) == LONG


def test_runs_outlive_the_series_process_and_the_same_command_follows_them(
    ray_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the SSH session that ran `cockpit series --ray` closed: its runs are held by the series' keeper, a detached
    # actor on the head, and go on; the same command again follows them instead of training them twice
    camp = tiny_campaign(tmp_path, "detached")
    nbm.mutate(camp, lambda nb: setattr(nb.validation, "every_updates", 10))
    env = {**cluster_env(), "PYTHONPATH": str(ROOT)}
    flags = ["--ray", ray_cluster.address, "--variants", "lr1e-4", "--seeds", "0", "--updates", str(FOLLOWED)]
    flags += ["--without-pilot", "a test of a series process that dies"]
    args = [sys.executable, "-m", "cockpit", "series", str(camp), *flags]
    series = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        deadline, moving = time.monotonic() + 300, []
        while time.monotonic() < deadline and not moving:
            moving = [d for d in runs.run_dirs(camp) if runs.summary(d).counts.get(ev.STEP, 0) > 0]
            time.sleep(0.3)
        assert moving, "no remote run reached its first update"
        series.kill()  # SIGKILL: nothing of the series process gets to say goodbye
        series.communicate(timeout=60)
    finally:
        if series.poll() is None:
            series.kill()
    rdir = moving[0]
    killed = time.time()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # a heartbeat of the keeper's after its driver died
        info = runs.remote_info(rdir) or {}
        if float(info.get("beat", 0)) > killed + 1:
            break
        time.sleep(0.3)
    assert str(info.get("keeper", "")).startswith("series:detached:"), info
    assert runs.state(rdir).status == "running" and runs.remote_alive(info), runs.state(rdir).stop_reason
    code = cli(["series", str(camp), *flags])
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"{rdir.name} is still running on the Ray cluster, held by the series keeper series:detached:" in err, err
    assert f"{rdir.name} followed" in err, err
    st = runs.state(rdir)
    assert st.status == "completed" and len(_curve(rdir)) == FOLLOWED, st.stop_reason
    assert [(r.id, r.status) for r in nbm.load(camp).runs if r.kind == "train"] == [(rdir.name, "completed")]
    info = runs.remote_info(rdir) or {}
    assert info.get("node_copy") == "removed" and not Path(str(info["node_dir"])).exists(), info
