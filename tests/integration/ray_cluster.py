"""A real Ray cluster of several nodes on this machine, for the tests of ``cockpit series --ray``.

Each node is its own ``ray start`` with a temp dir of its own under the test's
tmp path, so every process of a node (gcs, raylet, workers, and the run
processes its tasks start, whose run folders live there) names that folder on
its command line: the cluster stops exactly the processes it started, found by
that folder, never by a broad ``ray stop``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Node:
    name: str
    temp: Path
    node_id: str = ""
    lost: bool = False  # killed: no longer counted among the cluster's live nodes

    def processes(self) -> list[psutil.Process]:
        """Every live process of this node: those naming its temp dir, and their descendants."""
        key = str(self.temp)
        found: dict[int, psutil.Process] = {}
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                if any(key in a for a in p.info["cmdline"] or []):
                    found[p.pid] = p
                    for c in p.children(recursive=True):
                        found[c.pid] = c
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return [p for pid, p in found.items() if pid != os.getpid()]

    def kill(self) -> None:
        """The node lost: every process of it killed at once (SIGKILL), as a box that went away."""
        self.lost = True
        procs = self.processes()
        for p in procs:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=10)


@dataclass
class LocalCluster:
    root: Path
    env: dict[str, str]
    port: int = 0
    nodes: list[Node] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, name: str, *args: str, env: dict[str, str] | None = None) -> Node:
        temp = self.root / name
        temp.mkdir(parents=True, exist_ok=True)
        node = Node(name, temp)
        self.nodes.append(node)  # before it starts: a failed start is still stopped
        cmd = [str(RAY), "start", f"--temp-dir={temp}", "--num-cpus=1", "--disable-usage-stats"]
        cmd += ["--object-store-memory=100000000", *args]
        out = subprocess.run(cmd, env=env or self.env, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"ray start {name} failed:\n{out.stdout}\n{out.stderr}")
        return node

    def start(self, workers: list[tuple[str, int, str]]) -> None:
        """A head without GPUs, then one worker per (name, GPUs, GPU model) with that model's custom resource."""
        self.port = free_port()
        self._start("head", "--head", f"--port={self.port}", "--num-gpus=0", "--include-dashboard=false")
        for name, gpus, model in workers:
            res = json.dumps({f"gpu_model:{model}": gpus}) if model else "{}"
            self._start(name, f"--address={self.address}", f"--num-gpus={gpus}", f"--resources={res}")
        self.wait_nodes(len(self.nodes))

    def add(self, name: str, gpus: int, model: str, env: dict[str, str] | None = None) -> Node:
        """One more worker node, joined to the running cluster (``env``: its own environment)."""
        res = json.dumps({f"gpu_model:{model}": gpus}) if model else "{}"
        node = self._start(name, f"--address={self.address}", f"--num-gpus={gpus}", f"--resources={res}", env=env)
        self.wait_nodes(sum(1 for n in self.nodes if not n.lost))
        return node

    def wait_nodes(self, n: int, timeout: float = 120) -> None:
        """Until the cluster counts ``n`` live nodes (asked of the GCS through `ray list nodes`-free Python)."""
        code = (
            f"import ray, json; ray.init(address={self.address!r}, log_to_driver=False);"
            "print(json.dumps([[x['NodeID'], x['NodeManagerAddress'], x['Resources'], x['Alive']] for x in ray.nodes()]))"
        )
        deadline = time.monotonic() + timeout
        while True:
            out = subprocess.run(
                [sys.executable, "-c", code], env=self.env, capture_output=True, text=True, timeout=120
            )
            if out.returncode == 0 and sum(1 for x in _listed(out.stdout) if x[3]) >= n:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not reach {n} nodes: {out.stdout} {out.stderr}")
            time.sleep(1)

    def stop(self) -> None:
        """Stop every process this cluster started (SIGTERM, then SIGKILL), node by node, workers first."""
        for node in reversed(self.nodes):
            procs = node.processes()
            for p in procs:
                try:
                    p.terminate()
                except psutil.NoSuchProcess:
                    pass
            _, alive = psutil.wait_procs(procs, timeout=10)
            for p in alive:
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(alive, timeout=5)


def _listed(stdout: str) -> list[list[object]]:
    """The node list the probe printed: its last line that parses as one (Ray may print a line of its own after
    it, as it did under load in the chaos bench)."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("[["):
            try:
                got = json.loads(line)
            except ValueError:
                continue
            if isinstance(got, list):
                return got
    return []


def cluster_env(extra_path: list[Path] | None = None) -> dict[str, str]:
    """The environment every node starts with: this checkout's cockpit first on the path, one thread per run."""
    env = dict(os.environ)
    paths = [str(p) for p in (extra_path or [])] + [str(ROOT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["OMP_NUM_THREADS"] = "1"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env.pop("RAY_ADDRESS", None)
    return env
