"""A blockmgr cluster on this machine, for tests, notebooks and examples.

    from blockmgr.local import LocalCluster
    with LocalCluster(workers=2, memory="256MiB") as cluster:
        client = blockmgr.Client(cluster.master)

It starts ``bm-master`` and ``bm-worker`` processes on free loopback ports (from ``bin_dir``,
else $BM_BIN_DIR, else PATH), waits until every worker is registered, and stops them when
closed. Logs and disk stores go to a temporary directory kept until then.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Dict, List, Optional

from . import _blockmgr

__all__ = ["LocalCluster", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binary(name: str, bin_dir: Optional[str]) -> str:
    directory = bin_dir or os.environ.get("BM_BIN_DIR")
    if directory:
        path = os.path.join(directory, name)
        if not os.access(path, os.X_OK):
            raise FileNotFoundError("%s is not an executable" % path)
        return path
    found = shutil.which(name)
    if not found:
        raise FileNotFoundError("%s is not on PATH (set BM_BIN_DIR or pass bin_dir)" % name)
    return found


class LocalCluster:
    """bm-master and ``workers`` bm-workers (ids w1, w2, ...) on loopback ports."""

    def __init__(
        self,
        workers: int = 2,
        memory: str = "256MiB",
        bin_dir: Optional[str] = None,
        start_timeout: float = 20.0,
        heartbeat_timeout: float = 10.0,
    ) -> None:
        self.bin_dir = bin_dir
        self.memory = memory
        self.start_timeout = start_timeout
        self.heartbeat_timeout = heartbeat_timeout
        self.dir = tempfile.mkdtemp(prefix="blockmgr-local-")
        self.master = ""
        self._master: Optional[subprocess.Popen] = None
        self._workers: Dict[str, subprocess.Popen] = {}
        self._ports: Dict[str, int] = {}
        self._logs: List[object] = []
        try:
            self._start_master()
            for i in range(1, workers + 1):
                self.start_worker("w%d" % i)
        except BaseException:
            self.close()
            raise

    # ---- processes ----

    def _spawn(self, name: str, args: List[str]) -> subprocess.Popen:
        log = open(os.path.join(self.dir, name + ".log"), "ab")
        self._logs.append(log)
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def _wait(self, condition, what: str, process: subprocess.Popen, log: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            if condition():
                return
            time.sleep(0.02)
        raise RuntimeError("%s did not start:\n%s" % (what, self.log_tail(log)))

    def _listed_workers(self) -> List[str]:
        try:
            with _blockmgr.Client(self.master, timeout=0.5) as client:
                return [w.id for w in client.workers()]
        except _blockmgr.Error:
            return []

    def _master_up(self) -> bool:
        try:
            with _blockmgr.Client(self.master, timeout=0.5) as client:
                client.ping()
            return True
        except _blockmgr.Error:
            return False

    def _start_master(self) -> None:
        # A port can be taken between choosing and binding it: then the master exits; retry.
        for attempt in range(5):
            self.master = "tcp://127.0.0.1:%d" % free_port()
            self._master = self._spawn(
                "master",
                [_binary("bm-master", self.bin_dir), "--listen", self.master,
                 "--heartbeat-timeout", str(self.heartbeat_timeout)],
            )
            try:
                self._wait(self._master_up, "bm-master", self._master, "master")
                return
            except RuntimeError:
                self._stop(self._master)
                if attempt == 4:
                    raise

    def start_worker(self, worker_id: str, memory: Optional[str] = None) -> None:
        """Starts (or restarts, on the same port) worker ``worker_id`` and waits until the
        master lists it."""
        port = self._ports.setdefault(worker_id, free_port())
        process = self._spawn(
            worker_id,
            [_binary("bm-worker", self.bin_dir), "--master", self.master,
             "--listen", "tcp://127.0.0.1:%d" % port, "--memory", memory or self.memory,
             "--disk-dir", os.path.join(self.dir, "disk-" + worker_id), "--id", worker_id],
        )
        self._workers[worker_id] = process
        self._wait(lambda: worker_id in self._listed_workers(), "bm-worker " + worker_id,
                   process, worker_id)

    def kill_worker(self, worker_id: str) -> None:
        """Kills the worker at once (SIGKILL), as a crash would."""
        process = self._workers[worker_id]
        process.kill()
        process.wait()

    @staticmethod
    def _stop(process: Optional[subprocess.Popen]) -> None:
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def log_tail(self, name: str, lines: int = 30) -> str:
        try:
            with open(os.path.join(self.dir, name + ".log"), "rb") as f:
                return b"".join(f.readlines()[-lines:]).decode(errors="replace")
        except OSError:
            return "(no log)"

    def close(self) -> None:
        """Stops the workers and the master and removes their files."""
        for process in self._workers.values():
            self._stop(process)
        self._workers.clear()
        self._stop(self._master)
        self._master = None
        for log in self._logs:
            log.close()
        self._logs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *args: object) -> None:
        self.close()
