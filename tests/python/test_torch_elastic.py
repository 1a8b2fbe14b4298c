"""phub.torch in elastic jobs (docs/torch.md "Elastic jobs and torchrun --nnodes=MIN:MAX"):
ElasticBatches against a naive reference on random member schedules, the refusals, and a real
torchrun --nnodes=1:2 whose second node joins while the first trains: the restarted workers
carry on phubd's job (iteration, weights, data position). Exits 77 (skipped) without torch."""
import json
import math
import os
import random
import subprocess
import sys
import time
import unittest

import numpy as np

try:
    import torch
except ImportError:
    sys.exit(77)

import phub
import phub.torch
from phub.elastic import ElasticBatches, elastic_size
from phub_testing import REPO, Phubd, free_port

# PHUB_TEST_DEVICE=cuda (run_gpu.sh pytests, through test_torch_staged): elastic_optimizer's
# models on GPU 0, and the data of train_step and the leave test with them.
DEVICE = torch.device("cuda:0" if os.environ.get("PHUB_TEST_DEVICE") == "cuda" else "cpu")


class FakeJob:
    """phubd's side of ElasticBatches, from a member schedule: members[t] = the slots of
    iteration t (1-based); a slot's place is its index among them in slot order, and before(t)
    the sum of the earlier iterations' member counts."""

    def __init__(self, members):
        self.members = members

    def members_of(self, slot, t):
        ranks = sorted(self.members[t]) if t < len(self.members) else []
        before = sum(len(self.members[u]) for u in range(1, min(t, len(self.members))))
        if slot not in ranks:
            return {"member": False, "index": 0, "world": len(ranks),
                    "member_iterations_before": before}
        return {"member": True, "index": ranks.index(slot), "world": len(ranks),
                "member_iterations_before": before}


class Worker:
    """One worker's client and step counter over a FakeJob."""

    def __init__(self, job, slot, first_iteration):
        self.job, self.slot, self.next = job, slot, first_iteration

    def members_of(self, t):
        return self.job.members_of(self.slot, t)


class ElasticBatchesTest(unittest.TestCase):
    def reference(self, n, b, seed, epochs, global_batch):
        """Naive: the job's sample stream, epoch after epoch, cut into batches of b."""
        per_epoch = n // b
        stream = []
        for e in range(global_batch // per_epoch + 1):
            perm = np.random.default_rng([seed, e]).permutation(n)
            stream.extend(int(i) for i in perm[:per_epoch * b])
        return stream[global_batch * b:(global_batch + 1) * b]

    def test_random_schedules_take_every_batch_once_in_order(self):
        rng = random.Random(41)
        for case in range(60):
            n = rng.randint(1, 50)
            b = rng.randint(1, n)
            epochs = rng.randint(1, 3)
            seed = rng.randint(0, 2 ** 31)
            slots = rng.randint(1, 5)
            per_epoch = n // b
            # A random schedule: each iteration a random non-empty set of slots; a slot that
            # leaves may come back (a new worker in its slot), as torchrun's restarts do.
            members = [set()]
            total = 0
            while total < epochs * per_epoch + 10:
                s = set(rng.sample(range(slots), rng.randint(1, slots)))
                members.append(s)
                total += len(s)
            job = FakeJob(members)
            # One ElasticBatches per (slot, stint): a stint starts where the slot joins.
            taken = {}  # global batch -> (slot, iteration, indices)
            stop_at = set()
            iters = {}
            for t in range(1, len(members)):
                for slot in members[t]:
                    if slot not in iters or iters[slot][0].next != t:
                        w = Worker(job, slot, t)
                        iters[slot] = (w, ElasticBatches(w, lambda w=w: w.next, n, b, seed,
                                                         epochs))
                    w, it = iters[slot]
                    try:
                        indices = next(it)
                    except StopIteration:
                        stop_at.add(t)
                        continue
                    g = it.batches_taken[-1]
                    self.assertNotIn(g, taken, f"case {case}: batch {g} taken twice")
                    taken[g] = (slot, t, indices)
                    w.next += 1
                if stop_at:
                    break
            self.assertEqual(len(stop_at), 1, f"case {case}: members stopped at {stop_at}")
            t_stop = stop_at.pop()
            before_stop = sum(len(members[u]) for u in range(1, t_stop))
            self.assertGreaterEqual(before_stop, epochs * per_epoch)
            before_last = before_stop - len(members[t_stop - 1])
            self.assertLess(before_last, epochs * per_epoch, f"case {case}: stopped late")
            self.assertEqual(sorted(taken), list(range(before_stop)), f"case {case}")
            for g, (slot, t, indices) in taken.items():
                self.assertEqual(indices, self.reference(n, b, seed, epochs, g),
                                 f"case {case}: batch {g}")
                ranks = sorted(members[t])
                before = sum(len(members[u]) for u in range(1, t))
                self.assertEqual(g, before + ranks.index(slot))
            # Within each whole epoch, every sample once.
            for e in range(epochs):
                seen = [i for g in range(e * per_epoch, (e + 1) * per_epoch)
                        for i in taken[g][2]]
                self.assertEqual(len(seen), len(set(seen)))
                self.assertEqual(len(seen), per_epoch * b)

    def test_reading_ahead_is_refused(self):
        job = FakeJob([set(), {0}, {0}, {0}])
        w = Worker(job, 0, 1)
        batches = ElasticBatches(w, lambda: w.next, 8, 2, epochs=1)
        next(batches)
        with self.assertRaisesRegex(RuntimeError, "must not read ahead"):
            next(batches)  # no step() between: the same iteration again

    def test_a_worker_no_longer_member_stops(self):
        job = FakeJob([set(), {0, 1}, {0, 1}, {1}, {1}])
        w = Worker(job, 0, 1)
        batches = ElasticBatches(w, lambda: w.next, 100, 1, epochs=1)
        got = []
        for _ in batches:
            got.append(batches.batches_taken[-1])
            w.next += 1
        self.assertEqual(got, [0, 2])
        self.assertFalse(batches.last_members["member"])

    def test_the_size_comes_from_arguments_or_environment_never_world_size(self):
        saved = {k: os.environ.pop(k, None) for k in ("PHUB_MIN_WORKERS", "PHUB_MAX_WORKERS")}
        try:
            self.assertIsNone(elastic_size())
            self.assertEqual(elastic_size(2, 4), (2, 4))
            self.assertEqual(elastic_size(None, 3), (1, 3))
            with self.assertRaisesRegex(ValueError, "needs its maximum"):
                elastic_size(2, None)
            with self.assertRaisesRegex(ValueError, "min_workers <= max_workers"):
                elastic_size(3, 2)
            os.environ["PHUB_MIN_WORKERS"], os.environ["PHUB_MAX_WORKERS"] = "2", "5"
            os.environ["WORLD_SIZE"] = "3"
            self.assertEqual(elastic_size(), (2, 5))
            self.assertEqual(elastic_size(1, None), (1, 5))
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v


class RefusalTest(unittest.TestCase):
    def test_summation_mode_is_not_elastic(self):
        model = torch.nn.Linear(4, 2)
        with self.assertRaisesRegex(ValueError, "exist only on the\\s+workers.*ServerOptimizer"):
            phub.torch.connect(model, "127.0.0.1:1", rank=0, world_size=1, min_workers=1,
                               max_workers=2)


    def test_an_elastic_job_over_a_shared_ddp_group_is_refused(self):
        class Group:  # what DDP's process_group answers; a real one needs a second process
            def size(self):
                return 2
        model = torch.nn.parallel.DistributedDataParallel(
            torch.nn.Linear(4, 2), process_group=phub.torch.local_process_group())
        model.process_group = Group()
        with self.assertRaisesRegex(ValueError, "local_process_group"):
            phub.torch.ServerOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                       "127.0.0.1:1", rank=0, min_workers=1, max_workers=2)


def elastic_optimizer(address, seed, rank, momentum=0.9, **kwargs):
    torch.manual_seed(seed)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(),
                            torch.nn.Linear(5, 3)).to(DEVICE),
        process_group=phub.torch.local_process_group())
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=momentum)
    return model, phub.torch.ServerOptimizer(model, sgd, address, rank=rank, min_workers=1,
                                             max_workers=2, job="join-test", **kwargs)


def train_step(model, optimizer, seed):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
    x, y = x.to(DEVICE), y.to(DEVICE)
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()


def weights(model):
    return [p.detach().cpu().clone() for p in model.parameters()]


class JoinTest(unittest.TestCase):
    def test_a_joiner_gets_the_jobs_weights_and_iteration_not_its_own(self):
        """A ServerOptimizer that connects to a running elastic job sends nothing: its
        parameters become phubd's weights of the job's last iteration, bitwise, and its
        iteration the job's next; from then on both members hold the same weights."""
        self.join_and_step({})

    def test_linear_lr_scaling_doubles_the_step_at_two_members(self):
        """lr_scaling="linear" (plain SGD): with 2 members of a job of min 1, phubd steps with
        2 x lr x the mean of the two workers' gradients (each worker's own in .grad)."""
        self.join_and_step({"lr_scaling": "linear", "momentum": 0.0}, scale=2.0)

    def join_and_step(self, kwargs, scale=None):
        import threading
        with Phubd(2) as phubd:
            model_a, opt_a = elastic_optimizer(phubd.address, 1, 0, **kwargs)
            seen = {}  # A's iteration -> A's weights after it
            joined = {}
            errors = []

            def run_a():
                try:
                    while "first" not in joined or opt_a.iteration <= joined["first"]:
                        t = opt_a.iteration
                        train_step(model_a, opt_a, t)
                        seen[t] = weights(model_a)
                        time.sleep(0.01)
                except BaseException as e:  # noqa: B902 - reported by the main thread
                    errors.append(e)
            thread = threading.Thread(target=run_a)
            thread.start()
            while len(seen) < 3:
                time.sleep(0.01)
            model_b, opt_b = elastic_optimizer(phubd.address, 2, 0, **kwargs)  # slot 0 taken
            first = opt_b.iteration
            joined["first"] = first
            mine = weights(model_b)
            train_step(model_b, opt_b, first)
            thread.join(timeout=30)
            self.assertFalse(thread.is_alive())
            self.assertEqual(errors, [])
            self.assertEqual(opt_b.phub.rank, 1)
            self.assertEqual(opt_b.phub.resume_iteration, first - 1)
            self.assertGreater(first, 3)
            for got, want in zip(mine, seen[first - 1]):
                self.assertTrue(torch.equal(got, want), "the joiner's weights are not the job's")
            for a, b in zip(weights(model_a), weights(model_b)):
                self.assertTrue(torch.equal(a, b), "the members' weights differ after a step")
            self.assertEqual(opt_a.iteration, opt_b.iteration)
            if scale is not None:  # the joint step, from the weights B joined with
                for before, after, pa, pb in zip(mine, weights(model_b), model_a.parameters(),
                                                 model_b.parameters()):
                    mean = (pa.grad.double().cpu() + pb.grad.double().cpu()) / 2
                    torch.testing.assert_close(after.double(),
                                               before.double() - 0.1 * scale * mean,
                                               rtol=1e-5, atol=1e-6)
            opt_b.close()
            opt_a.close()


class LeaveTest(unittest.TestCase):
    def test_a_planned_leave_ends_the_leavers_batches_and_skips_none(self):
        """A worker that calls request_leave() goes on until its ElasticBatches stop (phubd says
        it is no longer a member); the other takes the job's batches from then on: every batch
        once, none skipped, the run's end the same for the job."""
        import threading
        data_x, data_y = torch.randn(80, 6).to(DEVICE), torch.randint(0, 3, (80,)).to(DEVICE)
        with Phubd(2) as phubd:
            model_a, opt_a = elastic_optimizer(phubd.address, 1, 0)
            batches_a = opt_a.batches(80, 2, epochs=2)
            errors = []

            def run(model, opt, batches, leave_after=None):
                try:
                    for n, indices in enumerate(batches):
                        if n == leave_after:
                            opt.phub.client.request_leave()
                        opt.zero_grad()
                        torch.nn.functional.cross_entropy(model(data_x[indices]),
                                                          data_y[indices]).backward()
                        opt.step()
                        time.sleep(0.005)
                except BaseException as e:  # noqa: B902 - reported by the main thread
                    errors.append(e)
            thread = threading.Thread(target=run, args=(model_a, opt_a, batches_a))
            thread.start()
            while len(batches_a.batches_taken) < 3:
                time.sleep(0.01)
            model_b, opt_b = elastic_optimizer(phubd.address, 2, 0)
            batches_b = opt_b.batches(80, 2, epochs=2)
            run(model_b, opt_b, batches_b, leave_after=5)
            self.assertFalse(batches_b.last_members["member"], "B stopped for another reason")
            opt_b.close()
            thread.join(timeout=60)
            self.assertFalse(thread.is_alive())
            self.assertEqual(errors, [])
            opt_a.close()
        taken = batches_a.batches_taken + batches_b.batches_taken
        self.assertEqual(sorted(taken), list(range(80)), "a batch skipped or taken twice")
        self.assertGreaterEqual(len(batches_b.batches_taken), 6)
        self.assertGreater(max(batches_a.batches_taken), max(batches_b.batches_taken) + 10)


# A worker of an elastic job of min 1 (a child process): trains 5 steps, by batches() (40
# samples of 8: its data runs out there) or by a count, says "trained N" and waits; a SIGTERM
# exits it through Python's shutdown (sys.exit), as a script's own handler would.
_CHILD = """
import signal, sys
from test_torch_elastic import elastic_optimizer, train_step
model, opt = elastic_optimizer(sys.argv[1], 1, 0)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
if sys.argv[2] == "batches":
    for i, _ in enumerate(opt.batches(40, 8, epochs=1)):
        train_step(model, opt, i)
else:
    for i in range(5):
        train_step(model, opt, i)
print("trained", opt.iteration - 1, flush=True)
signal.pause()
"""


class ExitTest(unittest.TestCase):
    def exit_then_join(self, phubd, how):
        """Runs _CHILD, SIGTERMs it once trained, and returns the iteration a worker connecting
        afterwards resumes the job at (0: a new job)."""
        child = subprocess.Popen([sys.executable, "-c", _CHILD, phubd.address, how],
                                 cwd=os.path.dirname(os.path.abspath(__file__)),
                                 stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(child.stdout.readline().split(), ["trained", "5"])
            child.send_signal(subprocess.signal.SIGTERM)
            self.assertEqual(child.wait(timeout=60), 0)
        finally:
            child.kill()
            child.wait()
        deadline = time.monotonic() + 30
        while True:  # a job ending may still refuse a Hello for a moment
            try:
                model, opt = elastic_optimizer(phubd.address, 2, 0)
                break
            except phub.PhubError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        resumed = opt.phub.resume_iteration
        opt.close()
        return resumed

    def test_an_exit_before_the_data_ran_out_is_a_loss_and_after_it_a_goodbye(self):
        """Python's shutdown (sys.exit in a SIGTERM handler, as at a torchrun restart) says no
        Goodbye while the worker's batches() have not run out, so phubd holds the job and the
        next worker carries it on from iteration 5 (or 6); once they have run out the exit is the
        worker's end: a Goodbye, the job ends, and the next worker starts a new one."""
        with Phubd(2) as phubd:
            # 5, or 6 where phubd passed the iteration nobody pushed (the hold)
            self.assertIn(self.exit_then_join(phubd, "count"), (5, 6), phubd.log())
        with Phubd(2) as phubd:
            self.assertEqual(self.exit_then_join(phubd, "batches"), 0, phubd.log())


class DataLoaderTest(unittest.TestCase):
    def test_a_batch_sampler_without_loader_workers_and_a_prefetching_loader_refused(self):
        """DataLoader(dataset, batch_sampler=ElasticBatches) with num_workers=0 gives the
        dataset's samples of each iteration's global batch; with num_workers=2 it would read
        ahead, and the second batch asked for one iteration raises."""
        from torch.utils.data import DataLoader, TensorDataset
        data = TensorDataset(torch.randn(40, 6), torch.randint(0, 3, (40,)))
        with Phubd(2) as phubd:
            model, opt = elastic_optimizer(phubd.address, 1, 0)
            batches = opt.batches(len(data), 4, seed=3, epochs=1)
            got = []
            for x, y in DataLoader(data, batch_sampler=batches):  # num_workers=0
                indices = batches.batch(batches.batches_taken[-1])
                self.assertTrue(torch.equal(x, data.tensors[0][indices]))
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                got.append(batches.batches_taken[-1])
            self.assertEqual(got, list(range(10)))  # alone: every batch, in order
            self.assertEqual(opt.iteration, 11)
            opt.close()
        with Phubd(2) as phubd:  # a fixed job's batches follow the same rule
            torch.manual_seed(0)
            model = torch.nn.parallel.DistributedDataParallel(
                torch.nn.Linear(6, 3), process_group=phub.torch.local_process_group())
            opt = phub.torch.ServerOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                             phubd.address, rank=0, world_size=1)
            batches = opt.batches(len(data), 4, seed=3)
            for n, (x, _) in enumerate(DataLoader(data, batch_sampler=batches)):
                self.assertTrue(torch.equal(x, data.tensors[0][batches.batch(n)]))
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
            self.assertEqual(batches.batches_taken, list(range(10)))
            loader = DataLoader(data, batch_sampler=opt.batches(len(data), 4, epochs=2),
                                num_workers=2)  # the first epoch is done: the second
            with self.assertRaisesRegex(RuntimeError, "must not read ahead"):
                next(iter(loader))
            opt.close()


SCRIPT = os.path.join(REPO, "examples", "torch_elastic_phub.py")


def read_progress(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class TorchrunElasticTest(unittest.TestCase):
    def agent(self, rdzv_port, progress, log):
        env = dict(os.environ, PHUB_ADDRESS=self.phubd.address, PHUB_MIN_WORKERS="1",
                   PHUB_MAX_WORKERS="2", OMP_NUM_THREADS="1", LOGLEVEL="INFO")
        cmd = [sys.executable, "-m", "phub.run", "--nnodes=1:2", "--nproc_per_node=1",
               "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{rdzv_port}",
               "--rdzv_id=elastic-test", "--rdzv_conf", "last_call_timeout=1",
               "--monitor_interval=1", SCRIPT, "--data", "synthetic", "--samples", "4096",
               "--batch", "32", "--epochs", "2", "--lr", "0.05", "--schedule", "iterations",
               "--warmup-iters", "5",
               "--step-delay", "0.05", "--progress", progress]
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd="/")

    def test_a_node_joining_restarts_the_workers_that_carry_on_and_one_leaving_costs_nothing(self):
        """Agent A trains alone; agent B joins: torchrun stops A's worker (SIGTERM) and starts
        both again, and they continue phubd's job. Then B is stopped: A's worker goes on alone,
        no restart. The job's data is taken once, in order, but for the batch each stopped
        worker was killed in."""
        with Phubd(2, "--rejoin-timeout-ms", "30000") as phubd:
            self.phubd = phubd
            rdzv = free_port()
            progress = os.path.join(phubd.dir.name, "progress.jsonl")
            logs = [open(os.path.join(phubd.dir.name, f"agent{i}.log"), "w+") for i in range(2)]
            a = self.agent(rdzv, progress, logs[0])
            agents = [a]
            problem = None
            b_left = None
            a_exited = None

            def wait_for(what, condition, seconds):
                deadline = time.monotonic() + seconds
                while not condition():
                    if time.monotonic() > deadline:
                        raise TimeoutError(what)
                    time.sleep(0.05)

            def records():
                return read_progress(progress) if os.path.exists(progress) else []
            try:
                wait_for("agent A's worker trains 25 steps", lambda: len(records()) >= 25, 40)
                self.assertIsNone(a.poll(), "agent A ended before B came")
                b_started = time.time()
                agents.append(self.agent(rdzv, progress, logs[1]))
                b = agents[1]
                wait_for("the restarted workers train 20 iterations together",
                         lambda: sum(r.get("world") == 2 for r in records()) >= 40, 40)
                b.terminate()  # B's node leaves: its agent stops its worker (SIGTERM)
                b_left = time.time()
                b.wait(timeout=30)
                wait_for("A's worker finishes", lambda: any(
                    r.get("done") and r["agent"] == a.pid for r in records()), 40)
                try:  # its agent then waits for B's at the exit barrier (300 s in torch 1.13)
                    a.wait(timeout=5)
                    a_exited = a.returncode
                except subprocess.TimeoutExpired:
                    a_exited = "waiting"
            except (TimeoutError, subprocess.TimeoutExpired) as e:
                problem = str(e)
            finally:
                for p in agents:
                    if p.poll() is None:
                        p.terminate()  # the agent passes SIGTERM on to its workers
                        try:
                            p.wait(timeout=15)
                        except subprocess.TimeoutExpired:
                            p.kill()
                            p.wait()
            outputs = []
            for f in logs:
                f.seek(0)
                outputs.append(f.read())
                f.close()
            detail = f"\n--- agent A:\n{outputs[0][-4000:]}\n--- agent B:\n{outputs[1][-4000:]}"
            detail += f"\n--- phubd:\n{phubd.log()[-3000:]}"
            self.assertIsNone(problem, detail)
            lines = records()
        steps = [r for r in lines if "done" not in r]
        by_pid = {}
        for r in steps:
            by_pid.setdefault(r["pid"], []).append(r)
        self.assertEqual(len(by_pid), 3, f"A's first worker, then two restarted: {by_pid.keys()}"
                         + detail)
        old = by_pid.pop(steps[0]["pid"])
        a2 = next(w for w in by_pid.values() if w[0]["agent"] == a.pid)
        b1 = next(w for w in by_pid.values() if w[0]["agent"] == b.pid)
        new = [a2, b1]
        # A's first worker: a fresh job from iteration 1, alone.
        self.assertEqual([r["iteration"] for r in old], list(range(1, len(old) + 1)))
        self.assertTrue(all(r["world"] == 1 for r in old))
        k = old[-1]["iteration"]
        # The restarted workers carry on phubd's job: each begins at the iteration phubd admits
        # it at, past A's worker's last (phubd may admit the two at different boundaries).
        firsts = sorted(w[0]["iteration"] for w in new)
        self.assertGreater(firsts[0], k, "the restarted workers did not resume the job "
                           f"(A's worker ended at {k}, they began at {firsts})" + detail)
        self.assertLessEqual(firsts[0], k + 3, detail)
        for w in new:
            its = [r["iteration"] for r in w]
            self.assertEqual(its, list(range(its[0], its[0] + len(its))))
        self.assertEqual(max(r["world"] for r in b1), 2, "never both members")
        # B left; A's worker went on alone to the end, without a restart (same process).
        self.assertGreater(a2[-1]["iteration"], b1[-1]["iteration"] + 5)
        self.assertEqual(a2[-1]["world"], 1)
        # The loss did not go back to the start's.
        start = np.mean([r["loss"] for r in old[:3]])
        resumed = np.mean([r["loss"] for w in new for r in w[:3]])
        self.assertLess(resumed, start - 0.3, f"loss {start:.3f} at the start, {resumed:.3f} "
                        "after the restart: the weights did not carry over")
        # The data: no batch twice; none skipped but the one each stopped worker was killed in
        # (phubd completed its iteration without it), just before the next batch taken after.
        batches = [r["batch"] for r in steps]
        self.assertEqual(len(batches), len(set(batches)), "a batch was taken twice")
        missing = sorted(set(range(max(batches) + 1)) - set(batches))
        first_new_batch = min(r["batch"] for w in new for r in w)
        after_b = min(r["batch"] for r in a2                    # A's first alone again
                      if r["iteration"] > b1[-1]["iteration"] and r["world"] == 1)
        # A lost member's slices are skipped until the change that tells the others takes
        # effect (docs/design.md "Elastic jobs": at most the iteration it died in and the next).
        at_join = set(range(old[-1]["batch"] + 1, first_new_batch))
        at_leave = set(range(b1[-1]["batch"] + 1, after_b))
        self.assertTrue(set(missing) <= at_join | at_leave,
                        f"skipped {missing}, allowed {sorted(at_join | at_leave)}")
        self.assertLessEqual(len(at_join & set(missing)), 2, f"skipped {missing}")
        self.assertLessEqual(len(at_leave & set(missing)), 2, f"skipped {missing}")
        # 2 epochs of 128 batches: the run stops at the first iteration past 256.
        self.assertGreaterEqual(max(batches) + 1, 256)
        self.assertLess(max(batches) + 1 - 2, 256)
        # The lr followed the job's iterations, across the restart (the schedule fast-forwarded
        # to the job's iteration): the example's warm-up (5) + cosine over 256 // 2 iterations.
        for r in steps:
            t = r["iteration"] - 1
            want = (t + 1) / 5 if t < 5 else 0.5 * (1 + math.cos(math.pi * min(1.0, (t - 5) / 123)))
            self.assertAlmostEqual(r["lr"], 0.05 * want, places=7, msg=f"iteration {t + 1}")
        # The cost of each change, for docs/torch.md.
        t_old = old[-1]["time"]
        first_new = min((w[0] for w in new), key=lambda r: r["time"])
        t_new = first_new["time"]
        gap_b = [r["time"] for r in a2 if r["time"] > b_left]
        print(f"\njoin: from A's worker's last step to the new group's first {t_new - t_old:.2f} s"
              f" (B's agent started {t_old - b_started:.2f} s before it): to the worker's main()"
              f" {first_new['main'] - t_old:.2f} s, joined phubd "
              f"{first_new['ready'] - t_old:.2f} s;"
              " "
              f"iterations phubd completed without a worker: {firsts[0] - k - 1}; leave: A's "
              f"worker stepped {gap_b[0] - b_left:.2f} s after B's agent got SIGTERM; A's agent "
              f"after its worker finished: {a_exited}", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
