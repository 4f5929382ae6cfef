"""A real local Ray cluster for tests: ``ray start --head`` on 127.0.0.1, always stopped.

:func:`local_cluster` starts a head node with ``ray start --head --block`` in a process
session of its own, so every process of the cluster (GCS, raylet, agents, workers) carries
that session id; stopping it sends SIGTERM to ``ray start`` (which stops its processes), then
SIGKILL to any process still in the session. Only this cluster's processes are touched:
``ray stop --force`` would kill every Ray process on the machine, other runs' clusters too.

The cluster listens on 127.0.0.1 only as its node address
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is Ray's switch for that; without it Ray replaces
127.0.0.1 with the machine's network address), uses token authentication with a fresh token
(``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN``), keeps its files in a short temp dir (Unix
socket paths are limited to ~107 bytes) and sends no usage statistics.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: Environment of the cluster's processes and of the driver connecting to it.
ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "token",
}


@dataclass
class Cluster:
    """A running head node: its ``address`` (``127.0.0.1:PORT``), temp dir and process."""

    address: str
    temp_dir: Path
    process: subprocess.Popen
    env: dict[str, str]

    def session_pids(self) -> list[int]:
        """Every live process of the cluster (its process session)."""
        import psutil

        pids = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getsid(proc.pid) == self.process.pid:
                    pids.append(proc.pid)
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue
        return pids

    def task_workers(self, name: str) -> list[int]:
        """Pids of the cluster's worker processes now executing a task called ``name``."""
        import psutil

        found = []
        for pid in self.session_pids():
            try:
                cmdline = psutil.Process(pid).cmdline()
            except psutil.Error:
                continue
            if cmdline and cmdline[0].startswith(f"ray::{name}"):
                found.append(pid)
        return found

    def driver_logs(self) -> list[Path]:
        """Log files of the drivers that connected (one per ``ray.init``)."""
        return sorted(self.temp_dir.glob("session_2*/logs/python-core-driver-*.log"))

    def stop(self) -> None:
        """Stop every process of the cluster (idempotent), then remove its temp dir."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=20)
        for pid in self.session_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_cluster(num_cpus: int = 2, timeout: float = 60.0) -> Cluster:
    """Start a head node and wait until a driver can connect to it."""
    temp_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    port = free_port()
    env = {**os.environ, **ENV, "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    ray = Path(sys.executable).parent / "ray"
    log = open(temp_dir / "ray-start.log", "wb")  # the process outlives this call
    process = subprocess.Popen(
        [
            str(ray),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            f"--num-cpus={num_cpus}",
            "--num-gpus=0",
            "--object-store-memory=200000000",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    cluster = Cluster(address=f"127.0.0.1:{port}", temp_dir=temp_dir, process=process, env=env)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(
                    "ray start exited:\n" + (temp_dir / "ray-start.log").read_text()[-3000:]
                )
            text = (temp_dir / "ray-start.log").read_text(errors="replace")
            if "Ray runtime started" in text and list(temp_dir.glob("session_*/sockets/raylet")):
                return cluster
            time.sleep(0.5)
        raise RuntimeError(f"ray start did not come up in {timeout} s")
    except BaseException:
        cluster.stop()
        raise


@contextlib.contextmanager
def local_cluster(num_cpus: int = 2) -> Iterator[Cluster]:
    """A started cluster, with this process set up to reach it as a driver; always stopped.

    The driver settings (the token, the loopback switch) are read by ray when it is imported,
    and again by :func:`_refresh_ray`, so they hold even where ray was imported before.
    """
    cluster = start_cluster(num_cpus)
    saved = {k: os.environ.get(k) for k in (*ENV, "RAY_AUTH_TOKEN")}
    loopback_before = None
    try:
        os.environ.update({k: cluster.env[k] for k in saved})
        loopback_before = _refresh_ray(loopback=True)
        yield cluster
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if loopback_before is not None:
            _refresh_ray(loopback=loopback_before)
        cluster.stop()


def _refresh_ray(loopback: bool) -> bool:
    """Make this process's ray read the environment's auth settings again, and use the
    loopback address (Ray otherwise turns 127.0.0.1 into the machine's network address and
    misses a cluster bound to 127.0.0.1). Returns the loopback switch as it was."""
    import ray._private.ray_constants as constants
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
    was = constants.ENABLE_RAY_CLUSTER
    constants.ENABLE_RAY_CLUSTER = not loopback
    return not was
