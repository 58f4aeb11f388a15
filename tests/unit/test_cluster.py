"""A series on Ray, without Ray: the mirror of a run folder, a remote run's liveness, the pilot said as resources."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cockpit import cluster, runs
from cockpit import events as ev
from cockpit import notebook as nbm
from cockpit.cluster import nodes
from cockpit.cluster.mirror import BadChunk, Chunk, Mirror, Receiver
from cockpit.errors import UsageError
from tests.fake_runs import cpu_stack, gpu_stack, make_campaign, standard_gates, write_run

ROOT = Path(__file__).resolve().parents[2]


def _sync(m: Mirror, head: Path) -> list[Chunk]:
    chunks = list(m.scan())
    r = Receiver(head)
    for c in chunks:
        r.apply(c)
    return chunks


def test_mirror_brings_appends_replacements_and_removals(tmp_path: Path) -> None:
    node, head = tmp_path / "node", tmp_path / "head"
    node.mkdir()
    head.mkdir()
    (node / "run.toml").write_text("[run]\n")
    (head / "run.toml").write_text("[run]\n")  # what the head sent: primed, never sent back
    m = Mirror(node)
    m.prime()
    with open(node / ev.EVENTS_FILE, "wb") as fh:
        fh.write(b'{"kind":"run_start"}\n{"kind":"st')  # a torn last line waits for its end
    (node / runs.PROCESS_FILE).write_text('{"pid": 1}')  # a node-local pid never reaches the head
    (node / runs.SUMMARY_FILE).write_text("{}")
    (node / ".metrics.json.abc.tmp").write_text("half")
    (node / "checkpoints").mkdir()
    (node / "checkpoints" / "update-00000002.pt").write_bytes(b"\x00" * 100)
    (node / "curve.csv").write_text("step,loss\n1,2.0\n2,1.9\n")
    first = _sync(m, head)
    assert {c.path for c in first} == {ev.EVENTS_FILE, "checkpoints/update-00000002.pt", "curve.csv"}
    assert (head / ev.EVENTS_FILE).read_bytes() == b'{"kind":"run_start"}\n'
    assert not (head / runs.PROCESS_FILE).exists() and not (head / runs.SUMMARY_FILE).exists()
    with open(node / ev.EVENTS_FILE, "ab") as fh:
        fh.write(b'ep"}\n')
    (node / "curve.csv").write_text("step,loss\n1,2.0\n")  # a resume cut the curve back: it travels whole
    (node / "checkpoints" / "update-00000002.pt").unlink()  # rotated past keep
    (node / "checkpoints" / "update-00000004.pt").write_bytes(b"\x01" * 50)
    second = _sync(m, head)
    assert [c.op for c in second if c.path == ev.EVENTS_FILE] == ["append"]
    assert [c.op for c in second if c.path == "curve.csv"] == ["put"]
    assert (head / ev.EVENTS_FILE).read_bytes() == (node / ev.EVENTS_FILE).read_bytes()
    assert (head / "curve.csv").read_text() == "step,loss\n1,2.0\n"
    assert sorted(p.name for p in (head / "checkpoints").iterdir()) == ["update-00000004.pt"]
    assert list(m.scan()) == []  # nothing changed: nothing travels


def test_a_checkpoint_never_reaches_the_head_ahead_of_its_curve(tmp_path: Path) -> None:
    """The run writes update 7's and 8's rows, then update 8's checkpoint, while a scan is under way (its first
    chunk sent): whatever that scan sends, the head's curve reaches the newest checkpoint it holds, so a node
    lost right after leaves a resume a curve without a gap (a series on Ray once resumed from update 8 over a
    curve that ended at 6)."""
    node, head = tmp_path / "node", tmp_path / "head"
    head.mkdir()
    (node / "checkpoints").mkdir(parents=True)
    (node / "checkpoints" / "update-00000004.pt").write_bytes(b"\x04" * 10)
    (node / "curve.csv").write_text("step,loss\n" + "".join(f"{i},2.0\n" for i in range(1, 7)))
    m, r = Mirror(node), Receiver(head)
    scan = m.scan()
    r.apply(next(scan))
    with open(node / "curve.csv", "a") as fh:
        fh.write("7,1.9\n8,1.8\n")
    (node / "checkpoints" / "update-00000008.pt").write_bytes(b"\x08" * 10)
    for c in scan:
        r.apply(c)
    newest = max(int(p.stem.split("-")[1]) for p in (head / "checkpoints").iterdir())
    last_row = int((head / "curve.csv").read_text().splitlines()[-1].split(",")[0])
    assert newest <= last_row, (newest, last_row)
    for c in m.scan():  # the next scan brings the rest
        r.apply(c)
    assert sorted(p.name for p in (head / "checkpoints").iterdir())[-1] == "update-00000008.pt"
    assert (head / "curve.csv").read_text() == (node / "curve.csv").read_text()


def test_large_file_travels_in_parts_and_lands_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cockpit.cluster import mirror

    monkeypatch.setattr(mirror, "PART", 1000)
    node, head = tmp_path / "node", tmp_path / "head"
    node.mkdir()
    head.mkdir()
    data = os.urandom(3500)
    (node / "checkpoint.pt").write_bytes(data)
    m = Mirror(node)
    chunks = list(m.scan())
    assert [c.last for c in chunks] == [False, False, False, True]
    r = Receiver(head)
    for c in chunks[:-1]:
        r.apply(c)
        assert not (head / "checkpoint.pt").exists()  # a reader never sees half of it
    r.apply(chunks[-1])
    assert (head / "checkpoint.pt").read_bytes() == data
    assert not [p for p in head.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", ".hidden", "a/../b", runs.PROCESS_FILE, runs.REMOTE_FILE, ""])
def test_head_refuses_paths_outside_the_run_or_its_records(tmp_path: Path, path: str) -> None:
    with pytest.raises(BadChunk):
        Receiver(tmp_path).apply(Chunk("put", path, 0, b"x"))


def test_head_refuses_a_path_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    rdir = tmp_path / "run"
    rdir.mkdir()
    (rdir / "checkpoints").symlink_to(outside)
    with pytest.raises(BadChunk, match="not a folder of the run"):
        Receiver(rdir).apply(Chunk("put", "checkpoints/update-1.pt", 0, b"x"))
    assert not list(outside.iterdir())


def _remote_run(tmp_path: Path) -> Path:
    camp = make_campaign(tmp_path)
    _, rdir = runs.create_run(camp, None, 0, kind="train")
    return rdir


def test_remote_run_lives_by_its_record_not_a_pid(tmp_path: Path) -> None:
    rdir = _remote_run(tmp_path)
    info: runs.RemoteInfo = {
        "address": "h:1",
        "beat": time.time(),
        "ended": False,
        "node_id": "ab" * 28,
        "hostname": "box2",
    }
    runs.write_remote(rdir, info)
    assert runs.is_alive(rdir)
    assert runs.state(rdir).status == "running"
    # the head's series was killed: its heartbeat goes stale, and no pid on the head keeps the run "running"
    runs.write_remote(rdir, {**info, "beat": time.time() - runs.REMOTE_STALE_S - 1})
    st = runs.state(rdir)
    assert not runs.is_alive(rdir)
    assert st.status == "crashed"
    assert "nothing holds its Ray task any more" in st.stop_reason and "box2" in st.stop_reason


def test_remote_run_whose_node_was_lost_is_crashed_with_the_reason(tmp_path: Path) -> None:
    rdir = _remote_run(tmp_path)
    runs.write_remote(
        rdir,
        {
            "beat": time.time(),
            "ended": True,
            "node_id": "cd" * 28,
            "hostname": "box3",
            "reason": "its node was lost (NodeDiedError: x)",
        },
    )
    st = runs.state(rdir)
    assert st.status == "crashed"
    assert st.stop_reason.startswith("remote run on node box3 (cdcdcdcdcdcd): its node was lost (NodeDiedError")


def test_demand_translates_the_pilot_by_the_parallel_rule(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    write_run(camp, stack=gpu_stack("NVIDIA H200", 143_771), gates=standard_gates(20_000, 20_000))
    write_run(camp, stack=cpu_stack(), gates=standard_gates(None, None))
    gpu, cpu = runs.campaign_runs(camp)
    d = cluster.demand(gpu)
    # 143,771 MiB // (20,000 + 600 MiB of CUDA context) = 6 runs on one GPU: each asks for a sixth of an H200
    assert d.num_gpus == pytest.approx(1 / 6)
    assert d.resources == {"gpu_model:H200": pytest.approx(1 / 6)}
    assert d.model == "H200" and "6 per 143,771 MiB NVIDIA H200" in d.why
    assert cluster.demand(gpu, nproc=2).num_gpus == 2  # a DDP run: whole GPUs
    big = cluster.per_gpu(140_000 * 2**20, 143_771 * 2**20)
    assert big == 1
    c = cluster.demand(cpu)
    assert (c.num_cpus, c.num_gpus, c.resources) == (1.0, 0.0, {})
    assert cluster.demand(None).why.startswith("no passed pilot")


def test_address_from_flag_notebook_and_ray_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    camp = make_campaign(tmp_path)
    nb = nbm.load(camp)
    assert cluster.address(nb, None) is None
    assert cluster.address(nb, "10.0.0.1:6379") == "10.0.0.1:6379"
    nbm.mutate(camp, lambda n: setattr(n, "cluster", nbm.ClusterSpec(ray="auto")))
    nb = nbm.load(camp)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(UsageError, match="RAY_ADDRESS is not set"):
        cluster.address(nb, None)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")
    assert cluster.address(nb, None) == "10.0.0.2:6379"


def test_ray_flag_without_ray_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cockpit.cli import main

    camp = make_campaign(tmp_path)
    monkeypatch.setattr(cluster, "available", lambda: False)
    code = main(["series", str(camp), "--ray", "127.0.0.1:1", "--without-pilot", "a test", "--seeds", "0"])
    assert code != 0
    assert (
        "Ray is not installed in this environment; install it with `pip install 'cockpit[ray]'`"
        in capsys.readouterr().err
    )
    assert not (camp / "runs").exists() or not list((camp / "runs").iterdir())  # refused before any run


def test_nothing_imports_ray_until_a_series_goes_to_ray() -> None:
    code = (
        "import sys, cockpit.cluster, cockpit.cluster.mirror, cockpit.commands.series, cockpit.series, cockpit.runs;"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.'))))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", "import json;" + code], capture_output=True, text=True, env=env, check=True
    )
    assert json.loads(out.stdout) == []


def _node(name: str, resources: dict[str, float], torch: str = "2.13.0", error: str = "") -> nodes.NodeFacts:
    return nodes.NodeFacts(
        node_id=name * 28,
        hostname=name,
        ip="10.0.0.1",
        resources=resources,
        versions={"cockpit": "0.1.0", "torch": torch},
        error=error,
    )


HEAD = {"cockpit": "0.1.0", "torch": "2.13.0"}


def test_nodes_refused_by_name_for_versions_and_unpiloted_gpu_models() -> None:
    demands = {"v": cluster.Demand(1.0, 0.5, {"gpu_model:H200": 0.5}, "pilot r0001")}
    found = [
        _node("aa", {"CPU": 8, "GPU": 8, "gpu_model:H200": 8}),
        _node("bb", {"CPU": 8, "GPU": 8, "gpu_model:H200": 8}, torch="2.9.0"),
        _node("cc", {"CPU": 8, "GPU": 4, "gpu_model:A100": 4}),
        _node("dd", {"CPU": 8}, error="ModuleNotFoundError: No module named 'cockpit'"),
    ]
    v = nodes.judge(found, demands, HEAD)
    assert [n.hostname for n in v.usable] == ["aa", "cc"]
    text = "\n".join(v.notes)
    assert "node bb 10.0.0.1 (bbbbbbbbbbbb): not used: torch 2.9.0 there, 2.13.0 on the head" in text
    assert "node cc 10.0.0.1 (cccccccccccc): its GPUs (gpu_model:A100) have no passed pilot in this series" in text
    assert "pilots passed on: H200" in text
    assert "node dd" in text and "No module named 'cockpit'" in text


def test_a_variant_no_usable_node_can_hold_refuses_the_series() -> None:
    demands = {"v": cluster.Demand(1.0, 0.5, {"gpu_model:H200": 0.5}, "pilot r0001")}
    found = [
        _node("aa", {"CPU": 8, "GPU": 4, "gpu_model:A100": 4}),
        _node("bb", {"CPU": 8, "GPU": 8, "gpu_model:H200": 8}, torch="2.9.0"),
    ]
    with pytest.raises(
        UsageError, match=r"no usable node of the cluster can hold a run of v, which asks for 0.5 GPU H200"
    ):
        nodes.judge(found, demands, HEAD)
    # a CPU series runs on any node of the head's versions
    assert len(nodes.judge(found, {"v": cluster.Demand()}, HEAD).usable) == 1


def test_a_node_whose_disk_cannot_hold_its_runs_checkpoints_is_refused_by_name() -> None:
    # two runs at once fit on each node by its resources; each keeps 2 checkpoints of 1 GiB, writes a third, and
    # its 0.5 GiB export: 2 * (3 * 1 + 0.5) = 7 GiB per node
    demands = {"v": cluster.Demand(1.0, 1.0, {}, "pilot r0001")}
    disk = nodes.NodeDisk(checkpoint=2**30, export=2**29, keep=2, source="pilot r0001")
    assert disk.need(nodes.lanes(_node("x", {"CPU": 2, "GPU": 2}), demands)) == 7 * 2**30
    small = dataclasses.replace(_node("aa", {"CPU": 2, "GPU": 2}), free=6 * 2**30)
    big = dataclasses.replace(_node("bb", {"CPU": 2, "GPU": 2}), free=8 * 2**30)
    v = nodes.judge([small, big], demands, HEAD, disk)
    assert [n.hostname for n in v.usable] == ["bb"] and v.lanes == {big.node_id: 2}
    note = "\n".join(v.notes)
    assert "node aa" in note and "6.0 GiB free on its disk" in note and "2 runs it would hold at once" in note, note
    assert "need 7.0 GiB" in note and "[checkpoints] keep = 1" in note, note
    # a node whose free disk is unknown is not refused for it (the survey's task failed: said by its own note)
    assert len(nodes.judge([dataclasses.replace(small, free=None), big], demands, HEAD, disk).usable) == 2


def test_with_a_storage_checkpoints_go_there_and_only_their_record_reaches_the_head(tmp_path: Path) -> None:
    from cockpit.runs import stored

    node, head, store = tmp_path / "node", tmp_path / "head", tmp_path / "shared" / "camp-x" / "r0001"
    node.mkdir()
    head.mkdir()
    m, r = Mirror(node, store), Receiver(head, store)
    (node / "checkpoints").mkdir()
    (node / "checkpoints" / "update-00000004.pt").write_bytes(b"\x04" * 3000)
    (node / "checkpoint.pt").write_bytes(b"last")  # the run's final checkpoint is not a periodic one: it travels
    (node / "curve.csv").write_text("step,loss\n1,2.0\n")
    chunks = list(m.scan())
    for c in chunks:
        r.apply(c)
    assert {(c.op, c.path) for c in chunks} == {
        ("stored", "checkpoints/update-00000004.pt"),
        ("put", "checkpoint.pt"),
        ("put", "curve.csv"),
    }
    assert sum(len(c.data) for c in chunks if c.op == "stored") < 300  # the record, never the checkpoint's bytes
    assert not (head / "checkpoints" / "update-00000004.pt").exists()
    assert (store / "checkpoints" / "update-00000004.pt").read_bytes() == b"\x04" * 3000
    entry = stored.stored(head)["checkpoints/update-00000004.pt"]
    assert entry["size"] == 3000 and entry["sha256"] == stored.file_digest(store / "checkpoints/update-00000004.pt")
    assert stored.checkpoint_steps(head) == [(4, "checkpoints/update-00000004.pt", entry["path"])]
    # rotated past keep on the node: gone from the storage (removed by the head, when it reads the rm) and from
    # the head's record
    (node / "checkpoints" / "update-00000004.pt").unlink()
    (node / "checkpoints" / "update-00000008.pt").write_bytes(b"\x08" * 300)
    later = list(m.scan())
    assert (store / "checkpoints" / "update-00000004.pt").exists()  # the node removes nothing there itself
    for c in later:
        r.apply(c)
    assert not (store / "checkpoints" / "update-00000004.pt").exists()
    assert [s for s, _, _ in stored.checkpoint_steps(head)] == [8]
    # a resume on the head brings the newest back into the run's folder, its digest checked
    assert stored.bring_back(head, "checkpoints/update-00000008.pt").read_bytes() == b"\x08" * 300
    assert stored.checkpoint_steps(head)[-1] == (8, "checkpoints/update-00000008.pt", "")
    (store / "checkpoints" / "update-00000008.pt").write_bytes(b"changed")
    with pytest.raises(stored.StorageError, match="not the one the run wrote"):
        stored.bring_back(head, "checkpoints/update-00000008.pt")


def test_a_node_lost_ahead_of_the_head_leaves_the_checkpoints_the_heads_records_name(tmp_path: Path) -> None:
    """The node rotates its checkpoints faster than its chunks reach the head; lost before they arrive, the
    checkpoint the head's records name is still in the storage, and a resume starts from it."""
    from cockpit.runs import stored

    node, head, store = tmp_path / "node", tmp_path / "head", tmp_path / "shared" / "r0001"
    node.mkdir()
    head.mkdir()
    (node / "checkpoints").mkdir()
    m, r = Mirror(node, store), Receiver(head, store)
    (node / "checkpoints" / "update-00000004.pt").write_bytes(b"\x04" * 100)
    for c in m.scan():
        r.apply(c)
    for step in (8, 12):  # the node goes on: keep 1, the older one rotated out, none of it read by the head
        (node / "checkpoints" / f"update-{step - 4:08d}.pt").unlink()
        (node / "checkpoints" / f"update-{step:08d}.pt").write_bytes(bytes([step]) * 100)
        list(m.scan())
    assert stored.checkpoint_steps(head) == [
        (4, "checkpoints/update-00000004.pt", str(store / "checkpoints/update-00000004.pt"))
    ]
    assert stored.bring_back(head, "checkpoints/update-00000004.pt").read_bytes() == b"\x04" * 100
    # a record whose file is gone from the storage (removed by hand) is not a checkpoint to resume from
    (head / "checkpoints" / "update-00000004.pt").unlink()
    (store / "checkpoints" / "update-00000004.pt").unlink()
    assert stored.checkpoint_steps(head) == []


def test_a_storage_the_node_cannot_write_sends_the_checkpoint_to_the_head(tmp_path: Path) -> None:
    node, head = tmp_path / "node", tmp_path / "head"
    node.mkdir()
    head.mkdir()
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the storage should be")
    m = Mirror(node, blocked / "r0001")
    (node / "checkpoints").mkdir()
    (node / "checkpoints" / "update-00000004.pt").write_bytes(b"\x04" * 300)
    chunks = list(m.scan())
    r = Receiver(head, blocked / "r0001")
    for c in chunks:
        r.apply(c)
    assert [c.op for c in chunks] == ["put"] and "not-a-folder" in m.store_error
    assert (head / "checkpoints" / "update-00000004.pt").read_bytes() == b"\x04" * 300


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "/tmp/elsewhere/checkpoints/update-00000004.pt", "relative/checkpoints/update-4.pt"]
)
def test_head_refuses_a_stored_record_outside_the_runs_storage(tmp_path: Path, path: str) -> None:
    store = tmp_path / "shared" / "r0001"
    (tmp_path / "head").mkdir()
    entry = json.dumps({"path": path, "size": 1, "sha256": "0" * 64}).encode()
    with pytest.raises(BadChunk, match="this run's storage"):
        Receiver(tmp_path / "head", store).apply(Chunk("stored", "checkpoints/update-00000004.pt", data=entry))
    with pytest.raises(BadChunk, match="no \\[cluster\\] storage"):
        Receiver(tmp_path / "head").apply(Chunk("stored", "checkpoints/update-00000004.pt", data=entry))


def test_a_node_where_the_storage_is_not_the_heads_folder_is_refused_by_name() -> None:
    found = [_node("aa", {"CPU": 2}), dataclasses.replace(_node("bb", {"CPU": 2}), storage="/mnt/x: no such file")]
    v = nodes.judge(found, {"v": cluster.Demand()}, HEAD)
    assert [n.hostname for n in v.usable] == ["aa"]
    note = "\n".join(v.notes)
    assert "node bb" in note and "[cluster] storage is not the head's folder there (/mnt/x: no such file)" in note


def test_the_notebook_refuses_a_relative_storage(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path) / "campaign.toml"
    text = camp.read_text() + '\n[cluster]\nstorage = "shared/ckpt"\n'
    camp.write_text(text)
    with pytest.raises(nbm.NotebookError, match="cluster.storage: give an absolute folder path"):
        nbm.load(camp)


def test_a_resume_on_a_machine_that_does_not_reach_the_storage_says_so(tmp_path: Path) -> None:
    """The run's checkpoints are recorded in [cluster] storage, not mounted here: the resume names the storage and
    the two ways on, never "wrote no periodic checkpoint"."""
    from cockpit import launch
    from cockpit.runs import stored

    camp = make_campaign(tmp_path)
    rid, rdir = write_run(camp, kind="train", status=None)  # crashed
    gone = "/nonexistent-storage/camp-x/r0001/checkpoints/update-00000008.pt"
    stored.write_stored(rdir, {"checkpoints/update-00000008.pt": {"path": gone, "size": 3, "sha256": "0" * 64}})
    with pytest.raises(UsageError, match="recorded in \\[cluster\\] storage .*does not reach.*--resume --ray"):
        launch.resume_run(camp, rid)


def test_a_node_is_named_by_its_hostname_unless_ray_start_gave_it_a_name() -> None:
    from cockpit.cluster.onray import node_name

    # Ray's NodeName is the node's address when `ray start` got no --node-name: the hostname says more
    assert (
        node_name({"NodeName": "10.0.0.3", "NodeManagerAddress": "10.0.0.3", "NodeManagerHostname": "box3"}) == "box3"
    )
    assert node_name({"NodeName": "gpu-a", "NodeManagerAddress": "10.0.0.3", "NodeManagerHostname": "box3"}) == "gpu-a"
    assert node_name({"NodeManagerAddress": "10.0.0.3"}) == "?"


def test_a_lost_tasks_reason_is_cut_after_a_sentence_not_inside_a_word() -> None:
    from cockpit.cluster.ray_keeper import said

    ray_text = (
        "The node with node id: 9c3e71f0d2aa and address: 10.0.0.3 and node name: 10.0.0.3 has been marked dead "
        "because the detector has missed too many heartbeats from it. This can happen when a (1) raylet crashes "
        "unexpectedly (OOM, etc.) (2) raylet has lagging heartbeats due to slow network or busy workload. "
        'To see node death information, use `ray list nodes --filter "node_id=9c3e71f0d2aa" --detail`.'
    )
    out = said(ray_text)
    assert len(out) <= 300 and out.endswith("too many heartbeats from it."), out
    assert said("short reason\nsecond line") == "short reason"
    assert said("word " * 100).endswith(" ...")
