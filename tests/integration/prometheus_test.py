#!/usr/bin/env python3
"""A real Prometheus server (Debian's prometheus) scrapes a real phubd while a job of two real
workers runs through it; the series it stored must say what the job did, counted independently
here: the pushes are workers x iterations x chunks, the bytes in are the pushes' bytes plus the
initial weights. `promtool check metrics` lints phubd's exposition before and after the job.

Exits 77 (skipped) without prometheus/promtool: deploy/install-deps.sh --test installs them.
PHUBD and PHUB_TEST_WORKER name the binaries (ctest sets them)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

PHUBD = os.environ["PHUBD"]
WORKER = os.environ["PHUB_TEST_WORKER"]
TENSORS = [1_000_000, 300_000, 5_000]  # floats: 4 + 2 + 1 chunks of 1 MiB
CHUNK_BYTES = 1 << 20
WORLD, ITERS = 2, 20
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wait_for as shared  # noqa: E402

DEADLINE_S = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, check, timeout_s=DEADLINE_S):
    return shared.wait_for(what, check, timeout_s)


def read(path):
    return shared.read(path).strip()


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def promtool_check(text: str):
    result = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                            capture_output=True, timeout=30)
    if result.returncode != 0 or result.stdout.strip() or result.stderr.strip():
        raise SystemExit(f"FAIL: promtool check metrics: rc {result.returncode}\n"
                         f"{result.stdout}{result.stderr}")


def main() -> int:
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            print(f"SKIP: {tool} not installed (bash deploy/install-deps.sh --test installs prometheus)")
            return 77
    tmp = tempfile.mkdtemp(prefix="phub-prometheus-")
    procs = []
    try:
        log = open(os.path.join(tmp, "phubd.log"), "w")
        phubd = subprocess.Popen(
            [PHUBD, "--max-world-size", str(WORLD), "--cores", "2", "--no-pin", "--listen",
             "127.0.0.1", "--port", "0", "--port-file", f"{tmp}/port", "--metrics-port", "0",
             "--metrics-port-file", f"{tmp}/metrics-port", "--chunk-bytes", str(CHUNK_BYTES)],
            stdout=log, stderr=subprocess.STDOUT)
        procs.append(phubd)
        port = int(wait_for("phubd's port file", lambda: read(f"{tmp}/port")))
        metrics_port = int(read(f"{tmp}/metrics-port"))
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        promtool_check(http_get(metrics_url))

        prom_port = free_port()
        with open(f"{tmp}/prometheus.yml", "w") as f:
            f.write("global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\n"
                    "scrape_configs:\n  - job_name: phubd\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{metrics_port}']\n")
        prom_log = open(f"{tmp}/prometheus.log", "w")
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={tmp}/prometheus.yml",
             f"--storage.tsdb.path={tmp}/data", f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=prom_log, stderr=subprocess.STDOUT)
        procs.append(prometheus)

        def query(expr: str):
            url = (f"http://127.0.0.1:{prom_port}/api/v1/query?" +
                   urllib.parse.urlencode({"query": expr}))
            try:
                answer = json.loads(http_get(url))
            except OSError:
                return None  # not up yet
            if answer.get("status") != "success" or not answer["data"]["result"]:
                return None
            return float(answer["data"]["result"][0]["value"][1])

        wait_for("Prometheus scraping phubd (up == 1)", lambda: query('up{job="phubd"}') == 1)

        workers = [subprocess.Popen(
            [WORKER, "--comm", "ps", "--host", "127.0.0.1", "--port", str(port), "--rank", str(r),
             "--world", str(WORLD), "--tensors", ",".join(map(str, TENSORS)), "--iters",
             str(ITERS), "--step-delay-ms", "100", "--job", "prom"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(WORLD)]
        procs += workers
        # While it runs, Prometheus sees a job of WORLD workers, under its name.
        wait_for("phub_job_running == 1 and phub_workers_connected == 2 in Prometheus",
                 lambda: query('phub_job_running{job_name="prom"}') == 1 and
                 query('phub_workers_connected{job_name="prom"}') == WORLD and
                 query('phub_job_world_size{job_name="prom"}') == WORLD and
                 query("phub_jobs") == 1)
        for w in workers:
            out, _ = w.communicate(timeout=DEADLINE_S)
            if w.returncode != 0:
                raise SystemExit(f"FAIL: a worker exited {w.returncode}:\n{out}")

        chunks = sum(-(-t * 4 // CHUNK_BYTES) for t in TENSORS)
        pushes = WORLD * ITERS * chunks
        bytes_in = WORLD * ITERS * 4 * sum(TENSORS) + 4 * sum(TENSORS)  # + rank 0's weights
        bytes_out = WORLD * (ITERS + 1) * 4 * sum(TENSORS)  # iteration 0's weights, then each
        wait_for("phub_jobs_ended_total == 1 in Prometheus",
                 lambda: query("phub_jobs_ended_total") == 1)
        expected = {
            "sum(phub_core_pushes_total)": pushes,
            "sum(phub_core_aggregations_total)": ITERS * chunks,
            "sum(phub_core_received_bytes_total)": bytes_in,
            "sum(phub_core_sent_bytes_total)": bytes_out,
            "sum(phub_core_aggregation_seconds_count)": ITERS * chunks,
            "sum(phub_core_round_seconds_count)": 2 * ITERS,  # each of the 2 cores, per iteration
            "phub_jobs_formed_total": 1,
            "phub_jobs_stalled_total": 0,
            # The ended job's series are gone; the PBox's say so.
            "phub_jobs": 0,
            "phub_memory_charged_bytes": 0,
            'count(phub_job_running) or vector(0)': 0,
        }
        failures = []
        for expr, want in expected.items():
            got = wait_for(f"{expr} in Prometheus", lambda: query(expr) is not None and
                           [query(expr)])[0]
            print(f"{expr} = {got:.0f} (expected {want})")
            if got != want:
                failures.append(f"{expr}: Prometheus has {got}, the job did {want}")
        # PromQL over phubd's series: what docs/operations.md tells an operator to start from.
        for expr in ("sum(rate(phub_core_received_bytes_total[1m]))",
                     "histogram_quantile(0.5, sum by (le) (rate(phub_core_round_seconds_bucket[1m])))",
                     "process_resident_memory_bytes"):
            got = query(expr)
            print(f"{expr} = {got}")
            if got is None or not got > 0:
                failures.append(f"{expr}: no positive value ({got})")
        promtool_check(http_get(metrics_url))
        if failures:
            raise SystemExit("FAIL:\n  " + "\n  ".join(failures))
        print("PASS: Prometheus scraped phubd; its series match the job")
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
