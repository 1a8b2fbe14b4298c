"""What tests/python's tests share: a real phubd on a free port, and ranks launched as torchrun
launches them (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT, PHUB_ADDRESS in the
environment). PHUBD names the daemon (ctest sets it; default build/phub/server/phubd)."""
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PHUBD = os.environ.get("PHUBD", os.path.join(REPO, "build", "phub", "server", "phubd"))


def free_port() -> int:
    """A port on 127.0.0.1 free a moment ago, picked at random below the kernel's ephemeral range
    (as tests/support/free_port.h does, and why): a port the kernel just handed out may be taken
    again by any outgoing connection of a test running beside this one."""
    low = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    for _ in range(100 if low > 2048 else 0):
        port = random.randrange(max(1024, low - 16384), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


class Phubd:
    """phubd --max-world-size N on a free port; stopped (SIGTERM) on exit; `log`: its output."""

    def __init__(self, world_size: int, *flags: str):
        self.dir = tempfile.TemporaryDirectory(prefix="phub-pytest-")
        port_file = os.path.join(self.dir.name, "port")
        self.log_path = os.path.join(self.dir.name, "phubd.log")
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [PHUBD, "--max-world-size", str(world_size), "--cores", "2", "--no-pin", "--port", "0",
             "--port-file", port_file, "--listen", "127.0.0.1", *flags],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not _read(port_file).strip():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"phubd did not start: {self.log()}")
            time.sleep(0.02)
        self.port = int(_read(port_file))
        self.address = f"127.0.0.1:{self.port}"

    def log(self) -> str:
        self._log.flush()
        return _read(self.log_path)

    def kill(self, sig=signal.SIGKILL):
        """SIGKILL: its connections close. SIGSTOP: they stay open and it falls silent."""
        self.process.send_signal(sig)
        if sig == signal.SIGKILL:
            self.process.wait()
        if sig == signal.SIGSTOP:
            # kill(2) returns before the threads stop: on a loaded machine a core thread that is
            # running still answered a push sent right after (a test then saw no silence). Back
            # only once every thread is stopped.
            tasks = f"/proc/{self.process.pid}/task"
            deadline = time.monotonic() + 10
            while not all(_read(f"{tasks}/{t}/stat").rsplit(")", 1)[-1].split()[:1] == ["T"]
                          for t in os.listdir(tasks)):
                if time.monotonic() > deadline:
                    raise RuntimeError("phubd did not stop within 10 s of SIGSTOP")
                time.sleep(0.005)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()
        self.dir.cleanup()


def launch_ranks(script: str, args: list, world_size: int, phubd_address: str,
                 extra_env=None) -> list:
    """world_size processes of `script args`, environment as torchrun sets it, and extra_env:
    a dict for every rank, or a function of the rank giving each its own."""
    master_port = free_port()
    processes = []
    for rank in range(world_size):
        extra = extra_env(rank) if callable(extra_env) else extra_env
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port),
                   PHUB_ADDRESS=phubd_address, OMP_NUM_THREADS="1", **(extra or {}))
        processes.append(subprocess.Popen([sys.executable, script, *args], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
    return processes


def wait_ranks(processes: list, timeout: float) -> list:
    """Each rank's (returncode, output); a rank still running at the deadline is killed and
    reported as such (a hang is a failure, never a wait without end)."""
    deadline = time.monotonic() + timeout
    results = []
    for p in processes:
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append((p.returncode, out))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            results.append((None, f"still running after {timeout} s; killed\n{out}"))
    return results
