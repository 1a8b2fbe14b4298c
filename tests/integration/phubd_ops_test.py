#!/usr/bin/env python3
"""Operations of a real phubd (issue 38, items 10 and 11), with a job of two real workers:

- checkpoints: a job's checkpoint folder that becomes unwritable under a running job (replaced
  by a regular file: that fails for root too, which ignores permission bits) makes every
  periodic checkpoint fail: phub_checkpoint_failures_total counts them; SIGTERM's checkpoint
  fails as well, and phubd exits 1 with a log line naming the folder and the error. With a
  writable folder SIGTERM exits 0.
- SIGHUP: logged and ignored (docs/operations.md "Failures"): phubd keeps serving the job.
- per-job series: phub_job_iteration, phub_job_iterations_per_second, the job's bytes in and
  out, members, state, rejoin deadline (a worker killed: waiting_for_rejoin until about now +
  --rejoin-timeout-ms), with job_name; the join logs each rank's address.
  `promtool check metrics` (when Debian's prometheus is installed) lints the exposition.

PHUBD and PHUB_TEST_WORKER name the binaries (ctest sets them)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

PHUBD = os.environ["PHUBD"]
WORKER = os.environ["PHUB_TEST_WORKER"]
TENSORS = [5000, 300, 20000]
WORLD = 2
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wait_for as shared  # noqa: E402

DEADLINE_S = 30


def wait_for(what, check, timeout_s=DEADLINE_S):
    return shared.wait_for(what, check, timeout_s)


def read(path):
    return shared.read(path)


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def sample(text, name, labels=""):
    """The value of series `name{labels}` (labels: the exact text inside the braces), or None."""
    series = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def promtool_check(text):
    if shutil.which("promtool") is None:
        print("promtool not installed: the exposition is not linted")
        return
    result = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                            capture_output=True, timeout=30)
    if result.returncode != 0 or result.stdout.strip() or result.stderr.strip():
        raise SystemExit(f"FAIL: promtool check metrics: rc {result.returncode}\n"
                         f"{result.stdout}{result.stderr}")


class Phubd:
    def __init__(self, tmp, name, *flags):
        self.log_path = os.path.join(tmp, f"{name}.log")
        self.tmp, self.name = tmp, name
        self.proc = subprocess.Popen(
            [PHUBD, "--max-world-size", str(WORLD), "--cores", "2", "--no-pin", "--listen",
             "127.0.0.1", "--port", "0", "--port-file", f"{tmp}/{name}.port", "--metrics-port",
             "0", "--metrics-port-file", f"{tmp}/{name}.metrics-port", "--chunk-bytes", "4096",
             *flags],
            stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT)
        self.port = int(wait_for("phubd's port file", lambda: read(f"{tmp}/{name}.port").strip()))
        self.metrics_port = int(read(f"{tmp}/{name}.metrics-port").strip())

    def log(self):
        return read(self.log_path)

    def metrics(self):
        return scrape(self.metrics_port)

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise SystemExit(f"FAIL: phubd did not exit within {DEADLINE_S} s of {sig!r}")


def start_workers(tmp, phubd, job, iters=100000, delay_ms=20):
    return [subprocess.Popen(
        [WORKER, "--comm", "ps", "--host", "127.0.0.1", "--port", str(phubd.port), "--rank",
         str(r), "--world", str(WORLD), "--tensors", ",".join(map(str, TENSORS)), "--iters",
         str(iters), "--step-delay-ms", str(delay_ms), "--job", job],
        stdout=open(os.path.join(tmp, f"{job}-w{r}.log"), "w"), stderr=subprocess.STDOUT)
        for r in range(WORLD)]


def failing_checkpoints_sighup_and_job_series(tmp, failures):
    ck = os.path.join(tmp, "ck")
    phubd = Phubd(tmp, "phubd-ck", "--checkpoint-dir", ck, "--checkpoint-every", "5")
    workers = start_workers(tmp, phubd, "ops")
    try:
        job = 'job_name="ops"'
        wait_for("a first checkpoint", lambda: (sample(phubd.metrics(),
                                                       "phub_checkpoints_written_total") or 0) >= 1)
        # Per-job series while the job runs.
        text = wait_for("phub_job_iterations_per_second > 0", lambda: (
            lambda t: t if (sample(t, "phub_job_iterations_per_second", job) or 0) > 0 else None)(
                phubd.metrics()))
        promtool_check(text)
        checks = {
            "phub_job_iteration": lambda v: v >= 5,
            "phub_job_received_bytes_total": lambda v: v >= 5 * WORLD * 4 * sum(TENSORS),
            "phub_job_sent_bytes_total": lambda v: v >= 5 * WORLD * 4 * sum(TENSORS),
            "phub_job_members": lambda v: v == WORLD,
            "phub_job_rejoin_deadline_seconds": lambda v: v == 0,
        }
        for name, ok in checks.items():
            value = sample(text, name, job)
            print(f"{name}{{{job}}} = {value}")
            if value is None or not ok(value):
                failures.append(f"{name}{{{job}}} = {value}")
        if sample(text, "phub_job_state", 'job_name="ops",state="running"') != 1:
            failures.append("phub_job_state{state=\"running\"} is not 1:\n" +
                            "\n".join(l for l in text.splitlines() if "phub_job_state" in l))
        log = phubd.log()
        for rank in range(WORLD):
            if not re.search(rf"job 'ops': rank {rank} joined from 127\.0\.0\.1:\d+", log):
                failures.append(f"no log line maps rank {rank} to its address:\n{log}")

        # SIGHUP: logged, ignored; the job goes on.
        before = sample(phubd.metrics(), "phub_job_iteration", job)
        phubd.proc.send_signal(signal.SIGHUP)
        wait_for("SIGHUP's log line", lambda: "SIGHUP" in phubd.log())
        wait_for("the job going on after SIGHUP",
                 lambda: (sample(phubd.metrics(), "phub_job_iteration", job) or 0) > before)
        if phubd.proc.poll() is not None:
            failures.append(f"SIGHUP ended phubd (exit {phubd.proc.returncode})")
        print("SIGHUP: " + next(l for l in phubd.log().splitlines() if "SIGHUP" in l))

        # The job's folder goes (a disk unmounted, a wrong cleanup): a file in its place. It is
        # moved aside in one step, not removed file by file: phubd may be writing a checkpoint
        # into it at that moment (rmtree then met a file it had not listed: CI failed on that).
        job_dir = os.path.join(ck, "ops")
        os.rename(job_dir, job_dir + ".gone")
        with open(job_dir, "w") as f:
            f.write("not a folder\n")
        count = wait_for("phub_checkpoint_failures_total > 0", lambda: sample(
            phubd.metrics(), "phub_checkpoint_failures_total"))
        print(f"phub_checkpoint_failures_total = {count}")
        status = phubd.stop(signal.SIGTERM)
        log = phubd.log()
        print(f"SIGTERM with an unwritable folder: exit {status}")
        if status != 1:
            failures.append(f"SIGTERM with a failed checkpoint: exit {status}, not 1:\n{log}")
        stop_lines = [l for l in log.splitlines() if "checkpoint on stop" in l and "failed" in l]
        if not stop_lines or job_dir not in stop_lines[0]:
            failures.append(f"no log line names the folder of the failed checkpoint:\n{log}")
        else:
            print(stop_lines[0])
    finally:
        for w in workers:
            w.kill()
            w.wait()
        if phubd.proc.poll() is None:
            phubd.proc.kill()


def writable_checkpoints_exit_0(tmp, failures):
    phubd = Phubd(tmp, "phubd-ok", "--checkpoint-dir", os.path.join(tmp, "ck-ok"),
                  "--rejoin-timeout-ms", "60000")
    workers = start_workers(tmp, phubd, "fine")
    try:
        wait_for("an iteration", lambda: (sample(phubd.metrics(), "phub_job_iteration",
                                                 'job_name="fine"') or 0) >= 2)
        # A worker lost: the job waits for its rejoin, and says until when.
        workers[1].kill()
        workers[1].wait()
        job = 'job_name="fine"'
        text = wait_for("phub_job_state{state=\"waiting_for_rejoin\"} == 1", lambda: (
            lambda t: t if sample(t, "phub_job_state",
                                  job + ',state="waiting_for_rejoin"') == 1 else None)(
                phubd.metrics()))
        deadline = sample(text, "phub_job_rejoin_deadline_seconds", job)
        members = sample(text, "phub_job_members", job)
        print(f"waiting for a rejoin: deadline in {deadline - time.time():.1f} s, "
              f"{members:.0f} members")
        if not (deadline and 0 < deadline - time.time() <= 60.5) or members != WORLD - 1:
            failures.append(f"rejoin deadline {deadline} (now {time.time()}), members {members}")
        promtool_check(text)
        status = phubd.stop(signal.SIGTERM)
        print(f"SIGTERM with a writable folder: exit {status}")
        if status != 0 or "checkpoint on stop written" not in phubd.log():
            failures.append(f"SIGTERM with a writable folder: exit {status}:\n{phubd.log()}")
    finally:
        for w in workers:
            w.kill()
            w.wait()
        if phubd.proc.poll() is None:
            phubd.proc.kill()


def main():
    tmp = tempfile.mkdtemp(prefix="phub-ops-")
    failures = []
    try:
        failing_checkpoints_sighup_and_job_series(tmp, failures)
        writable_checkpoints_exit_0(tmp, failures)
    finally:
        if not os.environ.get("PHUB_KEEP_TEST_FILES"):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"files kept in {tmp}")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS: checkpoint failures counted and fail the stop; SIGHUP ignored; per-job series")
    return 0


if __name__ == "__main__":
    sys.exit(main())
