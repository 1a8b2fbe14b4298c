#!/usr/bin/python3
"""phub.PsClient (the pybind11 module) against a real phubd: summation mode and phubd's
optimizer checked against float64 references on random inputs, the GIL released while waiting,
and errors raised as phub.PhubError (refusals with phubd's fix, a dead phubd), never a hang."""
import contextlib
import os
import signal
import tempfile
import threading
import time
import unittest

import numpy as np

import phub
from phub_testing import Phubd

SIZES = [("conv.weight", 3 * 3 * 8), ("fc.weight", 300_001), ("fc.bias", 10)]  # > 1 chunk


@contextlib.contextmanager
def environment(**values):
    """os.environ with `values` set (None: unset), restored on the way out."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_ranks(world_size, address, body):
    """body(rank) in one thread per rank; re-raises the first rank's exception."""
    results, errors = [None] * world_size, []

    def target(rank):
        try:
            results[rank] = body(rank)
        except BaseException as e:  # noqa: B902 - re-raised in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=target, args=(r,)) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        if t.is_alive():
            raise AssertionError("a rank is still running after 120 s: a hang")
    if errors:
        raise errors[0]
    return results


def averages(n, steps, seed, connect_args):
    """Random gradients of `steps` steps for n ranks, averaged through a fresh phubd in
    summation mode, rank r connecting with connect_args(r): (gradients, each rank's weights
    after each step). Tensors are pushed all, then waited for one by one."""
    rng = np.random.default_rng(seed)
    grads = [[[rng.standard_normal(e).astype(np.float32) for _, e in SIZES]
              for _ in range(n)] for _ in range(steps)]
    with Phubd(n) as phubd:
        def rank_body(rank):
            weights = [np.zeros(e, np.float32) for _, e in SIZES]
            got = []
            with phub.connect(SIZES, weights, address=phubd.address, rank=rank, world_size=n,
                              optimizer={"kind": "average"}, **connect_args(rank)) as client:
                client.init()
                for step in range(steps):
                    for t in range(len(SIZES)):
                        client.push(t, grads[step][rank][t])
                    for t in range(len(SIZES)):
                        client.wait(t)
                    got.append([w.copy() for w in weights])
            return got

        return grads, run_ranks(n, phubd.address, rank_body)


def assert_float64_mean(grads, results):
    """Every rank's every step: the float64 mean of the ranks' gradients, to float32."""
    for step, pushed in enumerate(grads):
        for t in range(len(SIZES)):
            reference = np.mean([g[t].astype(np.float64) for g in pushed], axis=0)
            for rank, got in enumerate(results):
                np.testing.assert_allclose(got[step][t], reference, rtol=1e-6, atol=1e-7,
                                           err_msg=f"rank {rank} step {step} tensor {t}")


class SummationTest(unittest.TestCase):
    def test_average_equals_float64_mean(self):
        # Rank r serves its connections to phubd's 2 cores on 1 + r % 2 threads (io_threads).
        n, steps = 3, 3
        grads, results = averages(n, steps, 7, lambda rank: {"io_threads": 1 + rank % 2})
        assert_float64_mean(grads, results)

    def test_the_staged_client_on_host_memory_equals_float64_mean(self):
        # phub.DeviceClient with device -1 (phub.torch's CUDA path, through the host engine):
        # fc.weight goes as 293 segments of 4 KiB; rank 0 a tensor at a time, rank 1 by
        # push_many/wait_many.
        n, steps = 2, 3
        rng = np.random.default_rng(11)
        grads = [[[rng.standard_normal(e).astype(np.float32) for _, e in SIZES]
                  for _ in range(n)] for _ in range(steps)]
        with Phubd(n) as phubd:
            def rank_body(rank):
                sent = [np.zeros(e, np.float32) for _, e in SIZES]
                weights = [np.zeros(e, np.float32) for _, e in SIZES]
                client = phub.connect_device(
                    SIZES, [a.ctypes.data for a in sent], [a.ctypes.data for a in weights], -1,
                    address=phubd.address, rank=rank, world_size=n,
                    optimizer={"kind": "average"}, segment_bytes=4096)
                client.init(0)
                self.assertEqual(client.resume_iteration, 0)
                got, ids = [], list(range(len(SIZES)))
                for step in range(steps):
                    for t in ids:
                        sent[t][:] = grads[step][rank][t]
                    if rank == 0:
                        for t in ids:
                            client.push(t, 0)
                        for t in ids:
                            client.wait(t, 0)
                    else:
                        client.push_many(ids, 0)
                        client.wait_many(ids, 0)
                    got.append([w.copy() for w in weights])
                client.close()
                return got

            results = run_ranks(n, phubd.address, rank_body)
            self.assertRegex(phubd.log(), r"started: 2 workers, 295 tensors")
        assert_float64_mean(grads, results)

    def test_a_compact_wire_stays_within_its_rounding_of_the_float64_mean(self):
        # bf16 both ways (pushes with error feedback, the mean back as rounded changes), rank 0
        # by argument, rank 1 by PHUB_WIRE: within bf16's rounding of the float64 mean, and off
        # the float32 mean by more than float32 could be (the bytes really went as bf16).
        n, steps = 2, 3
        with environment(PHUB_WIRE="bf16"):
            grads, results = averages(n, steps, 9,
                                      lambda rank: {"wire": "bf16"} if rank == 0 else {})

        def size_at(step, t):  # per element: the pushes' largest and the mean's magnitude
            g = [grads[step][r][t].astype(np.float64) for r in range(n)]
            return np.max(np.abs(g), axis=0) + np.abs(np.mean(g, axis=0))

        for step in range(steps):
            for t in range(len(SIZES)):
                reference = np.mean([grads[step][r][t].astype(np.float64) for r in range(n)],
                                    axis=0)
                # Per element, within bf16's half-ulp (2^-9) of: this step's pushes, the step
                # before's (its rounding residual is fed into this push), and the change sent
                # back (this mean less the last).
                scale = size_at(step, t) + (size_at(step - 1, t) if step else 0) + 1e-30
                for rank in range(n):
                    error = np.abs(results[rank][step][t] - reference)
                    self.assertTrue(np.all(error <= 2.0 ** -7 * scale),
                                    f"step {step} tensor {t}: off by {np.max(error / scale)} "
                                    "of the values' size, past bf16's rounding")
                    if reference.size > 100:
                        self.assertGreater(np.max(error / scale), 2.0 ** -20,
                                           "exact to float32: the wire was not bf16")

    def test_server_momentum_equals_float64_reference(self):
        n, lr, mu = 2, 0.1, 0.9
        rng = np.random.default_rng(8)
        w0 = [rng.standard_normal(e).astype(np.float32) for _, e in SIZES]
        grads = [[[rng.standard_normal(e).astype(np.float32) for _, e in SIZES]
                  for _ in range(n)] for _ in range(3)]
        with Phubd(n) as phubd:
            def rank_body(rank):
                weights = [w.copy() if rank == 0 else np.zeros_like(w) for w in w0]
                with phub.connect(SIZES, weights, address=phubd.address, rank=rank,
                                  world_size=n,
                                  optimizer={"kind": "momentum", "lr": lr, "momentum": mu}) as c:
                    c.init()
                    for step in range(3):
                        for t in range(len(SIZES)):
                            c.push(t, grads[step][rank][t])
                        c.wait_all()
                return weights

            with environment(PHUB_IO_THREADS="2"):  # every rank: two threads
                results = run_ranks(n, phubd.address, rank_body)
        w = [x.astype(np.float64) for x in w0]
        v = [np.zeros_like(x) for x in w]
        for step in range(3):
            for t in range(len(SIZES)):
                g = np.mean([grads[step][r][t].astype(np.float64) for r in range(n)], axis=0)
                v[t] = mu * v[t] + g
                w[t] = w[t] - lr * v[t]
        for rank in range(n):
            for t in range(len(SIZES)):
                np.testing.assert_allclose(results[rank][t], w[t], rtol=1e-5, atol=1e-6)


class ElasticTest(unittest.TestCase):
    def test_a_joiner_and_a_leaver_average_over_each_iterations_members(self):
        """Summation mode in an elastic job of 2 to 3: ranks 0 and 1 start, rank 2 joins after
        iteration 3 (lock-step: the change takes effect at 5), rank 1 asks to leave after 8 (from
        10). Every landed mean equals the float64 mean of that iteration's members' gradients,
        and members_of tells each the same members."""
        rng = np.random.default_rng(11)
        steps = 14
        grads = [[[rng.standard_normal(e).astype(np.float32) for _, e in SIZES]
                  for _ in range(3)] for _ in range(steps + 1)]
        with Phubd(3) as phubd:
            weights = [[np.zeros(e, np.float32) for _, e in SIZES] for _ in range(3)]
            clients = [None] * 3

            def connect(rank):
                clients[rank] = phub.connect(SIZES, weights[rank], address=phubd.address,
                                             rank=rank, world_size=3, min_workers=1,
                                             start_workers=2, optimizer={"kind": "average"})
                clients[rank].init()

            run_ranks(2, phubd.address, connect)
            means, told = {}, {}

            def iterate(it, ranks):
                def body(k):
                    rank = ranks[k]
                    m = clients[rank].members_of(it)
                    if not m["member"]:
                        return None
                    for t in range(len(SIZES)):
                        clients[rank].push(t, grads[it][rank][t])
                    clients[rank].wait_all()
                    told.setdefault(it, {})[rank] = m
                    means.setdefault(it, {})[rank] = [w.copy() for w in weights[rank]]
                    return rank
                return [r for r in run_ranks(len(ranks), phubd.address, body) if r is not None]

            pushed = {}
            for it in range(1, 4):
                pushed[it] = iterate(it, [0, 1])
            joiner = threading.Thread(target=connect, args=(2,))
            joiner.start()
            deadline = time.monotonic() + 30
            while clients[0].members_of(5)["world"] != 3:
                self.assertLess(time.monotonic(), deadline, "the join was not announced")
                time.sleep(0.005)
            pushed[4] = iterate(4, [0, 1])
            joiner.join(timeout=30)
            self.assertEqual(clients[2].resume_iteration, 4)
            for it in range(5, 9):
                pushed[it] = iterate(it, [0, 1, 2])
            clients[1].request_leave()
            while clients[0].members_of(10)["world"] != 2:
                self.assertLess(time.monotonic(), deadline + 30, "the leave was not announced")
                time.sleep(0.005)
            for it in range(9, steps + 1):
                pushed[it] = iterate(it, [0, 1, 2])
            self.assertFalse(clients[1].members_of(10)["member"])
            for c in clients:
                c.close()
        self.assertEqual([len(pushed[it]) for it in range(1, steps + 1)],
                         [2, 2, 2, 2, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2])
        for it in range(1, steps + 1):
            ranks = sorted(pushed[it])
            places = sorted(told[it][r]["index"] for r in ranks)
            self.assertEqual(places, list(range(len(ranks))), f"iteration {it}")
            for r in ranks:
                self.assertEqual(told[it][r]["world"], len(ranks))
            for t in range(len(SIZES)):
                reference = np.mean([grads[it][r][t].astype(np.float64) for r in ranks], axis=0)
                for r in ranks:
                    np.testing.assert_allclose(means[it][r][t], reference, rtol=1e-6, atol=1e-7,
                                               err_msg=f"iteration {it} tensor {t} rank {r}")


class SharedPboxTest(unittest.TestCase):
    def test_two_named_jobs_at_once_each_get_their_own_mean(self):
        # Jobs "a" (2 ranks) and "b" (3 ranks) through one phubd at once, summation mode: each
        # rank sees its own job's mean, never a mix of both jobs' gradients.
        jobs = {"a": 2, "b": 3}
        rng = np.random.default_rng(11)
        grads = {j: [[rng.standard_normal(e).astype(np.float32) for _, e in SIZES]
                     for _ in range(n)] for j, n in jobs.items()}
        members = [(j, r) for j, n in jobs.items() for r in range(n)]
        with Phubd(3) as phubd:
            def member_body(index):
                job, rank = members[index]
                weights = [np.zeros(e, np.float32) for _, e in SIZES]
                with phub.connect(SIZES, weights, address=phubd.address, rank=rank,
                                  world_size=jobs[job], optimizer={"kind": "average"},
                                  job=job) as client:
                    client.init()
                    for t in range(len(SIZES)):
                        client.push(t, grads[job][rank][t])
                    for t in range(len(SIZES)):
                        client.wait(t)
                    return [w.copy() for w in weights]

            results = run_ranks(len(members), phubd.address, member_body)
            log = phubd.log()
        for index, (job, rank) in enumerate(members):
            for t in range(len(SIZES)):
                reference = np.mean([grads[job][r][t].astype(np.float64)
                                     for r in range(jobs[job])], axis=0)
                np.testing.assert_allclose(results[index][t], reference, rtol=1e-6, atol=1e-7,
                                           err_msg=f"job {job} rank {rank} tensor {t}")
        self.assertIn("job 'a' started", log)
        self.assertIn("job 'b' started", log)

    def test_the_job_name_comes_from_the_launcher(self):
        args = ("ps:1", 0, 1)
        with environment(PHUB_JOB=None, TORCHELASTIC_RUN_ID=None, SLURM_JOB_ID=None):
            self.assertEqual(phub.resolve(*args).job, "")
            os.environ["SLURM_JOB_ID"] = "4242"
            self.assertEqual(phub.resolve(*args).job, "4242")
            os.environ["TORCHELASTIC_RUN_ID"] = "none"  # torchrun without --rdzv-id
            self.assertEqual(phub.resolve(*args).job, "4242")
            os.environ["TORCHELASTIC_RUN_ID"] = "run-7"
            self.assertEqual(phub.resolve(*args).job, "run-7")
            os.environ["PHUB_JOB"] = "mine"
            self.assertEqual(phub.resolve(*args).job, "mine")
            self.assertEqual(phub.resolve(*args, job="explicit").job, "explicit")


class GilTest(unittest.TestCase):
    def test_wait_lets_other_threads_run(self):
        # Rank 1 pushes late; while rank 0 waits, this thread must keep counting.
        with Phubd(2) as phubd:
            counted = []
            started = threading.Event()

            def rank_body(rank):
                weights = [np.zeros(e, np.float32) for _, e in SIZES]
                with phub.connect(SIZES, weights, address=phubd.address, rank=rank,
                                  world_size=2, optimizer={"kind": "average"}) as c:
                    c.init()
                    if rank == 1:
                        started.wait(30)
                        time.sleep(0.5)
                    for t in range(len(SIZES)):
                        c.push(t, np.ones(SIZES[t][1], np.float32))
                    if rank == 0:
                        started.set()
                        before = counter[0]
                        c.wait_all()
                        counted.append(counter[0] - before)
                    else:
                        c.wait_all()

            counter = [0]
            stop = threading.Event()

            def count():
                while not stop.is_set():
                    counter[0] += 1

            counting = threading.Thread(target=count)
            counting.start()
            try:
                run_ranks(2, phubd.address, rank_body)
            finally:
                stop.set()
                counting.join()
            self.assertGreater(counted[0], 1000, "the GIL was held while waiting")


class ErrorTest(unittest.TestCase):
    def test_refused_hello_names_the_fix(self):
        with Phubd(2) as phubd:
            with self.assertRaises(phub.PhubError) as raised:
                phub.connect(SIZES, [np.zeros(e, np.float32) for _, e in SIZES],
                             address=phubd.address, rank=0, world_size=3)
            self.assertIn("world size", str(raised.exception))
            self.assertIn("--max-world-size 2", str(raised.exception))

    def test_different_optimizers_are_refused(self):
        # The second to say Hello is refused; the first then waits for a partner that never
        # comes, until phubd's --form-timeout-ms ends it.
        with Phubd(2, "--form-timeout-ms", "2000") as phubd:
            messages = run_ranks(2, phubd.address, lambda r: rank_body_at(phubd, r))
        self.assertIn("asks for optimizer", messages[1])
        self.assertIn("give every worker the same optimizer", messages[1])
        self.assertIsNotNone(messages[0], "rank 0 joined a job that never formed")

    def test_cuda_tensors_without_a_gpu_say_why(self):
        # phub.torch's CUDA path (phub.DeviceClient) on a machine without a GPU: a PhubError
        # saying there is no CUDA device (or no CUDA in this build), before any connection.
        if os.path.exists("/dev/nvidia0"):  # run_gpu.sh pytests: the refusal cannot happen
            self.skipTest("this machine has a GPU (/dev/nvidia0)")
        with Phubd(1) as phubd:
            with self.assertRaises(phub.PhubError) as raised:
                phub.connect_device(SIZES, [0] * len(SIZES), [0] * len(SIZES), 0,
                                    address=phubd.address, rank=0, world_size=1)
        self.assertRegex(str(raised.exception), "no usable CUDA device|no CUDA toolkit")
        with self.assertRaises(ValueError):
            phub.DeviceClient("127.0.0.1", 1, 0, 1, SIZES, [0], [0], 0)

    def test_io_threads_below_one_or_not_a_number_are_refused(self):
        weights = [np.zeros(e, np.float32) for _, e in SIZES]
        with self.assertRaises(ValueError) as raised:
            phub.connect(SIZES, weights, address="127.0.0.1:1", rank=0, world_size=1,
                         io_threads=0)
        self.assertIn("io_threads 0: at least 1", str(raised.exception))
        with environment(PHUB_IO_THREADS="four"), self.assertRaises(ValueError) as raised:
            phub.connect(SIZES, weights, address="127.0.0.1:1", rank=0, world_size=1)
        self.assertIn("PHUB_IO_THREADS='four'", str(raised.exception))

    def test_a_wire_phubd_does_not_know_or_a_mix_of_wires_is_refused(self):
        weights = [np.zeros(e, np.float32) for _, e in SIZES]
        with self.assertRaises(ValueError) as raised:
            phub.connect(SIZES, weights, address="127.0.0.1:1", rank=0, world_size=1,
                         wire="int8")
        self.assertRegex(str(raised.exception), "wire: .*int8.*fp32.*bf16.*fp16")
        with environment(PHUB_WIRE_WEIGHTS="bf16"), self.assertRaises(ValueError) as raised:
            phub.connect(SIZES, weights, address="127.0.0.1:1", rank=0, world_size=1)
        self.assertIn("PHUB_WIRE_WEIGHTS='bf16'", str(raised.exception))
        # Rank 1 sends bf16 where rank 0 sent fp32: refused, naming both and the fix.
        with Phubd(2, "--form-timeout-ms", "2000") as phubd:
            def body(rank):
                if rank == 1:
                    time.sleep(0.3)  # rank 0's Hello first
                try:
                    phub.connect(SIZES, [np.zeros(e, np.float32) for _, e in SIZES],
                                 address=phubd.address, rank=rank, world_size=2,
                                 optimizer={"kind": "average"}, connect_timeout_ms=5000,
                                 wire="bf16" if rank == 1 else "fp32")
                except phub.PhubError as e:
                    return str(e)
                return None

            messages = run_ranks(2, phubd.address, body)
        self.assertIn("rank 1 sends bf16 (weights too), rank 0 fp32", messages[1])
        self.assertIn("PHUB_WIRE", messages[1])

    def test_bad_buffers_are_type_errors(self):
        with self.assertRaises(TypeError):
            phub.connect(SIZES, [np.zeros(e, np.float64) for _, e in SIZES],
                         address="127.0.0.1:1", rank=0, world_size=1)
        with self.assertRaises(ValueError):
            phub.connect(SIZES, [np.zeros(e + 1, np.float32) for _, e in SIZES],
                         address="127.0.0.1:1", rank=0, world_size=1)
        with self.assertRaises(ValueError):
            phub.connect(SIZES, [np.zeros(e, np.float32) for _, e in SIZES],
                         address="127.0.0.1:1", rank=0, world_size=1,
                         optimizer={"kind": "average", "weight_decay": 0.1})

    def test_silent_phubd_raises_within_its_liveness_deadline(self):
        with Phubd(1, "--liveness-timeout-ms", "1000") as phubd:
            weights = [np.zeros(e, np.float32) for _, e in SIZES]
            client = phub.connect(SIZES, weights, address=phubd.address, rank=0, world_size=1,
                                  optimizer={"kind": "average"})
            client.init()
            phubd.kill(signal.SIGSTOP)
            for t in range(len(SIZES)):
                client.push(t, np.ones(SIZES[t][1], np.float32))
            with self.assertRaises(phub.PhubError) as raised:
                client.wait_all()
            self.assertIn("nothing heard from phubd", str(raised.exception))
            del client  # closes; phubd is resumed and stopped by the context manager


class LaunchTest(unittest.TestCase):
    def test_addresses(self):
        self.assertEqual(phub.parse_address("10.0.0.1:7171"), ("10.0.0.1", 7171))
        self.assertEqual(phub.parse_address("psbox"), ("psbox", 7070))
        self.assertEqual(phub.parse_address("[fd00::1]:9000"), ("fd00::1", 9000))
        for bad in ("", "h:0", "h:70000", "h:x"):
            with self.assertRaises(ValueError, msg=bad):
                phub.parse_address(bad)

    def test_torchrun_environment_and_explicit_arguments(self):
        with environment(RANK="3", WORLD_SIZE="4", LOCAL_RANK="1", PHUB_ADDRESS="ps:7272",
                         PHUB_TOKEN="s3cret"):
            launch = phub.resolve()
            self.assertEqual((launch.host, launch.port, launch.rank, launch.world_size,
                              launch.local_rank, launch.token), ("ps", 7272, 3, 4, 1, "s3cret"))
            launch = phub.resolve("other:1", rank=0, world_size=2, token="t")
            self.assertEqual((launch.host, launch.port, launch.rank, launch.world_size,
                              launch.token), ("other", 1, 0, 2, "t"))
            with self.assertRaises(ValueError):
                phub.resolve(rank=4)  # out of range for WORLD_SIZE=4
            del os.environ["RANK"]
            with self.assertRaises(ValueError) as raised:
                phub.resolve()
            self.assertIn("torchrun", str(raised.exception))


class TokenFileTest(unittest.TestCase):
    """PHUB_TOKEN_FILE is read by phubd's reader (tests/phub/common/token_file_test.cc has the
    same cases): trailing whitespace trimmed, spaces and tabs included."""

    def read(self, contents):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "token")
            with open(path, "wb") as f:
                f.write(contents)
            with environment(PHUB_TOKEN_FILE=path, PHUB_TOKEN=None):
                return phub.resolve("h:1", rank=0, world_size=1).token

    def test_trailing_whitespace_is_trimmed_as_phubd_does(self):
        for contents in (b"s3cret\n", b"s3cret\r\n", b"s3cret \t\n", b"s3cret\t", b"s3cret"):
            self.assertEqual(self.read(contents), "s3cret", contents)
        self.assertEqual(self.read(b" a b\tc\n"), " a b\tc")

    def test_empty_missing_and_oversized_files_name_the_file(self):
        for contents, words in ((b"", "no token"), (b" \n", "no token"),
                                (b"x" * 4097, "over 4096 bytes")):
            with self.assertRaises(phub.PhubError, msg=contents) as raised:
                self.read(contents)
            self.assertIn(words, str(raised.exception))
            self.assertIn("token", str(raised.exception))
        with environment(PHUB_TOKEN_FILE="/nonexistent/token", PHUB_TOKEN=None):
            with self.assertRaises(phub.PhubError) as raised:
                phub.resolve("h:1", rank=0, world_size=1)
        self.assertIn("/nonexistent/token", str(raised.exception))


def rank_body_at(phubd, rank):
    kind = {"kind": "average"} if rank == 0 else {"kind": "sgd", "lr": 0.1}
    if rank == 1:
        time.sleep(0.3)  # rank 0's Hello first
    try:
        phub.connect(SIZES, [np.zeros(e, np.float32) for _, e in SIZES], address=phubd.address,
                     rank=rank, world_size=2, optimizer=kind, connect_timeout_ms=5000)
    except phub.PhubError as e:
        return str(e)
    return None


if __name__ == "__main__":
    unittest.main(verbosity=2)
