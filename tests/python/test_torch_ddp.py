#!/usr/bin/python3
"""phub.torch against DDP's own gloo allreduce, with Debian's python3-torch (CPU), N = 2 and 4:
the hook's averaged gradients, training through it, the server-side optimizer against the
local one, DDP's bucket rebuild, and failures (phubd killed, a peer dead) surfacing as
exceptions. Exits 77 (ctest: skipped) when torch is not installed."""
import datetime
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import torch
except ImportError:
    print("SKIP: python3-torch is not installed (deploy/install-deps.sh --torch installs it)")
    sys.exit(77)

from phub_testing import HERE, Phubd, free_port, launch_ranks, wait_ranks

WORKER = os.path.join(HERE, "ddp_worker.py")
RUN_TIMEOUT_S = 180  # a rank still running then is a hang: killed, and the test fails


def run(scenario, world_size, *phubd_flags, during=None, env=None):
    """`scenario` on world_size ranks beside a fresh phubd; each rank's saved result.
    during(phubd, out_dir), if given, runs while the ranks do."""
    with tempfile.TemporaryDirectory(prefix="phub-ddp-") as out_dir, \
            Phubd(world_size, *phubd_flags) as phubd:
        procs = launch_ranks(WORKER, [scenario, out_dir], world_size, phubd.address, env)
        if during:
            during(phubd, out_dir)
        for rank, (code, output) in enumerate(wait_ranks(procs, RUN_TIMEOUT_S)):
            if code != 0:
                raise AssertionError(f"rank {rank} exited {code}:\n{output}\n"
                                     f"phubd:\n{phubd.log()}")
        return [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(world_size)]


def assert_all_close(ours, theirs, rtol, atol, what):
    assert len(ours) == len(theirs), f"{what}: {len(ours)} tensors vs {len(theirs)}"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol,
                                   msg=lambda m, i=i: f"{what}, parameter {i}: {m}")


class HookTest(unittest.TestCase):
    def check_grads(self, world_size):
        results = run("grads", world_size)
        for rank, r in enumerate(results):
            for step, (gloo, ours) in enumerate(zip(r["gloo"], r["phub"])):
                # Float sums in different orders (gloo's ring vs phubd's), nothing more.
                assert_all_close(ours, gloo, 1e-5, 1e-7,
                                 f"N={world_size} rank {rank} iteration {step}")
            # Each rank's gradients are the same average.
            assert_all_close(r["phub"][-1], results[0]["phub"][-1], 0, 0, f"rank {rank} vs 0")
        # DDP rebuilt its buckets after iteration 0 (other groupings, other order), and the
        # hook, keyed by parameter, followed: the gradients above still matched.
        # (PyTorch 1.13: one bucket in forward order, then several in backward order.)
        buckets = results[0]["buckets"]
        self.assertGreater(len(buckets[1]), 1, "the test wants several buckets")
        self.assertNotEqual(buckets[0], buckets[1], "DDP did not rebuild its buckets")
        self.assertEqual(buckets[1], buckets[2])
        self.assertEqual(sorted(sum(buckets[0], [])), sorted(sum(buckets[1], [])))

    def test_averaged_gradients_equal_gloo_n2(self):
        self.check_grads(2)

    def test_averaged_gradients_equal_gloo_n4(self):
        self.check_grads(4)

    def check_train(self, world_size):
        for rank, r in enumerate(run("train", world_size)):
            assert_all_close(r["phub"], r["gloo"], 1e-4, 1e-6,
                             f"N={world_size} rank {rank}, after 5 momentum steps")

    def test_training_equals_gloo_n2(self):
        self.check_train(2)

    def test_training_equals_gloo_n4(self):
        self.check_train(4)

    def test_a_compact_wire_trains_within_its_rounding_of_gloo(self):
        self.check_compact_wire()

    def check_compact_wire(self, env=None):
        # PHUB_WIRE=bf16 reaches the hook's client: the gradients go as bf16 with error
        # feedback, the means come back as bf16 changes. After 5 momentum steps the weights are
        # within bf16's rounding of gloo's float32 ones, and not equal to float32's precision.
        for rank, r in enumerate(run("train", 2, env={"PHUB_WIRE": "bf16", **(env or {})})):
            assert_all_close(r["phub"], r["gloo"], 2e-2, 2e-4, f"bf16 rank {rank}")
            worst = max(float((a - b).abs().max()) for a, b in zip(r["phub"], r["gloo"]))
            self.assertGreater(worst, 1e-5, "as close as float32: the wire was not bf16")
            print(f"rank {rank}: bf16 wire, worst difference to gloo {worst:.3g}")


class ServerOptimizerTest(unittest.TestCase):
    def check(self, kind):
        results = run(f"server-{kind}", 2)
        for rank, r in enumerate(results):
            assert_all_close(r["server"], r["local"], 1e-4, 1e-6,
                             f"{kind}, rank {rank}, after 5 steps")
            # Every rank installs the same weights, bit for bit.
            assert_all_close(r["server"], results[0]["server"], 0, 0, f"{kind} rank {rank}")

    def test_sgd(self):
        self.check("sgd")

    def test_momentum(self):
        self.check("momentum")

    def test_nesterov(self):
        self.check("nesterov")

    def test_adam(self):
        self.check("adam")

    def test_momentum_on_a_compact_wire(self):
        # PHUB_WIRE=bf16 reaches ServerOptimizer's client: within bf16's rounding of the local
        # float32 optimizer, not equal to float32's precision, and the same on every rank
        # (each holds the weights phubd's rounded changes built, bit for bit).
        results = run("server-momentum", 2, env={"PHUB_WIRE": "bf16"})
        for rank, r in enumerate(results):
            assert_all_close(r["server"], r["local"], 2e-2, 2e-4, f"bf16 momentum rank {rank}")
            worst = max(float((a - b).abs().max()) for a, b in zip(r["server"], r["local"]))
            self.assertGreater(worst, 1e-5, "as close as float32: the wire was not bf16")
            assert_all_close(r["server"], results[0]["server"], 0, 0, f"bf16 rank {rank}")

    def check_scheduled(self, kind):
        results = run(f"scheduled-{kind}", 2)
        for rank, r in enumerate(results):
            # The schedule moved: lr differs along the run, and both sides saw the same.
            self.assertEqual(r["lrs"]["server"], r["lrs"]["local"])
            self.assertGreaterEqual(len(set(r["lrs"]["server"])), 6)
            assert_all_close(r["server"], r["local"], 1e-4, 1e-6,
                             f"{kind} with a schedule, rank {rank}, after 60 steps")
            assert_all_close(r["server"], results[0]["server"], 0, 0, f"{kind} rank {rank}")

    def test_momentum_follows_warm_up_and_cosine(self):
        self.check_scheduled("momentum")

    def test_adam_follows_step_decay(self):
        self.check_scheduled("adam")

    def check_state(self, kind, env=None):
        results = run(f"state-{kind}", 2, env=env)
        for rank, r in enumerate(results):
            self.assertEqual(r["steps"], 3)
            # phubd's state is the local torch optimizer's after the same steps (sums in
            # another order: float32 rounding apart).
            self.assertEqual(sorted(r["server_state"]), sorted(r["local_state"]))
            for index, ours in r["server_state"].items():
                theirs = r["local_state"][index]
                for key, value in theirs.items():
                    if torch.is_tensor(value) and value.dim() > 0:
                        torch.testing.assert_close(ours[key], value, rtol=1e-4, atol=1e-6,
                                                   msg=lambda m: f"{kind} {key}: {m}")
                    else:
                        self.assertEqual(float(ours[key]), float(value), f"{kind} {key}")
            # The restarted job ends bitwise where the uninterrupted one did.
            assert_all_close(r["again"], r["first"], 0, 0, f"{kind} restarted, rank {rank}")

    def test_momentum_state_round_trips_bitwise(self):
        self.check_state("momentum")

    def test_adam_state_round_trips_bitwise(self):
        self.check_state("adam")

    def test_a_change_of_kind_is_refused(self):
        for rank, r in enumerate(run("kind-changed", 2)):
            self.assertEqual(r.get("step"), 1, f"rank {rank}: {r}")
            self.assertIn("the optimizer became momentum", r["error"])


class OverlapForwardTest(unittest.TestCase):
    """ServerOptimizer(overlap_forward=True): the weights come in module by module in the next
    forward, and training is bitwise the same as with step() installing them."""

    def check(self, kind):
        results = run(f"overlap-{kind}", 2)
        for rank, r in enumerate(results):
            # Deferred: step() left the parameters alone (a step always changes them here).
            self.assertEqual(r["unchanged_after_step"], [True] * len(r["unchanged_after_step"]),
                             f"{kind} rank {rank}")
            # Yet every forward saw the fresh weights, and the end is the same bit for bit.
            self.assertEqual(r["losses"]["lazy"], r["losses"]["plain"], f"{kind} rank {rank}")
            assert_all_close(r["state_dict"], r["state_dict_plain"], 0, 0,
                             f"{kind} rank {rank}: model.state_dict() after step 2")
            assert_all_close(r["lazy"], r["plain"], 0, 0, f"{kind} rank {rank}: the end")

    def test_momentum(self):
        self.check("momentum")

    def test_adam(self):
        self.check("adam")

    def test_a_parameter_used_without_its_module_is_named(self):
        for rank, r in enumerate(run("overlap-misuse", 2)):
            # Step 0 used the initial weights (nothing pending); step 1's forward used head's
            # before they came in, and its end says so.
            self.assertEqual(r.get("step"), 1, f"rank {rank}: {r}")
            self.assertIn("parameter head.weight, head.bias did not run", r["error"])
            self.assertIn("previous step's weights", r["error"])


class C10dTest(unittest.TestCase):
    """init_process_group("phub"): plain DDP through phubd (phub/python/phub/c10d.py)."""

    def test_plain_ddp_through_the_phub_backend_equals_gloo(self):
        self.check_c10d()

    def check_c10d(self, env=None, client="PsClient"):
        # A ring of 4 slots of 16 KiB: every bucket (0.25 MB, the first iteration's larger) is
        # bigger than the whole ring, so allreduces take back their own slots as they go.
        results = run("c10d", 2, env={"PHUB_C10D_SLOTS": "4", "PHUB_C10D_SLOT_BYTES": "16384",
                                      **(env or {})})
        for rank, r in enumerate(results):
            self.assertEqual(r["backend"], "phub")
            self.assertEqual(r["client"], client)
            # Every bucket of 5 iterations went through phubd, in 16 KiB pieces: the model's
            # 347 k floats of gradients are >= 85 pieces an iteration.
            self.assertGreaterEqual(r["pieces"], 5 * 85)
            assert_all_close(r["phub"], r["gloo"], 1e-5, 1e-6, f"c10d rank {rank}")
            self.assertEqual(r["total"], 3.0)
            self.assertIn("does not do reduce_scatter", r["refused"])

    def test_a_compact_wire_is_refused_naming_what_takes_it(self):
        import phub.c10d  # noqa: F401 - the backend under test
        saved = os.environ.get("PHUB_WIRE")
        os.environ["PHUB_WIRE"] = "bf16"
        try:
            with self.assertRaises(ValueError) as raised:
                phub.c10d.ProcessGroupPhub(torch.distributed.HashStore(), 0, 1,
                                           datetime.timedelta(seconds=10))
        finally:
            if saved is None:
                os.environ.pop("PHUB_WIRE")
            else:
                os.environ["PHUB_WIRE"] = saved
        self.assertIn("PHUB_WIRE=bf16: the phub backend carries float32 only",
                      str(raised.exception))
        self.assertIn("ServerOptimizer", str(raised.exception))

    def test_phub_run_registers_the_backend_for_an_unchanged_script(self):
        script = os.path.join(HERE, "c10d_script.py")
        with Phubd(2) as phubd:
            env = dict(os.environ, PHUB_ADDRESS=phubd.address, OMP_NUM_THREADS="1")
            out = subprocess.run([sys.executable, "-m", "phub.run", "--nproc_per_node", "2",
                                  "--master_port", str(free_port()), script], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=RUN_TIMEOUT_S)
            self.assertEqual(out.returncode, 0, out.stdout + phubd.log())
            self.assertIn("rank 0 of 2: backend phub, sum 3.0", out.stdout)
            self.assertIn("rank 1 of 2: backend phub, sum 3.0", out.stdout)


class OptimizerSpecTest(unittest.TestCase):
    """What ServerOptimizer asks phubd to run: the torch optimizer's own settings, or a refusal
    that names what to change (never an approximation)."""

    def setUp(self):
        self.params = [torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))]

    def test_supported_optimizers(self):
        import phub.torch as pt
        self.assertEqual(pt.optimizer_spec(torch.optim.SGD(self.params, lr=0.1)),
                         {"kind": "sgd", "lr": 0.1, "momentum": 0.0, "weight_decay": 0})
        spec = pt.optimizer_spec(torch.optim.SGD(self.params, lr=0.1, momentum=0.9,
                                                 weight_decay=1e-4))
        self.assertEqual((spec["kind"], spec["momentum"], spec["weight_decay"]),
                         ("momentum", 0.9, 1e-4))
        spec = pt.optimizer_spec(torch.optim.SGD(self.params, lr=0.1, momentum=0.9,
                                                 nesterov=True))
        self.assertEqual(spec["kind"], "nesterov")
        spec = pt.optimizer_spec(torch.optim.Adam(self.params, lr=1e-3, betas=(0.8, 0.99),
                                                  eps=1e-6))
        self.assertEqual((spec["kind"], spec["beta1"], spec["beta2"], spec["eps"]),
                         ("adam", 0.8, 0.99, 1e-6))

    def test_refusals_name_what_to_change(self):
        import phub.torch as pt
        for optimizer, part in [
                (torch.optim.SGD(self.params, lr=0.1, momentum=0.9, dampening=0.1), "dampening"),
                (torch.optim.Adam(self.params, amsgrad=True), "amsgrad"),
                (torch.optim.AdamW(self.params), "AdamW is not one of phubd's optimizers"),
                (torch.optim.SGD([{"params": self.params[:1], "lr": 0.1},
                                  {"params": self.params[1:], "lr": 0.2}], lr=0.1),
                 "one group")]:
            with self.assertRaises(ValueError) as raised:
                pt.optimizer_spec(optimizer)
            self.assertIn(part, str(raised.exception))


class ServerStepsTest(unittest.TestCase):
    """What ServerOptimizer would do differently from torch is refused before it connects:
    an optimizer over part of the model (phubd steps every trainable parameter), and a
    parameter without a gradient that phubd would still move (find_unused_parameters=True with
    momentum, Adam or weight decay; plain SGD moves it by lr x 0, as torch leaves it)."""

    def setUp(self):
        self.model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))

    def test_an_optimizer_over_part_of_the_model_is_refused(self):
        import phub.torch as pt
        optimizer = torch.optim.SGD(self.model[1].parameters(), lr=0.1)
        spec = pt.optimizer_spec(optimizer)
        with self.assertRaises(ValueError) as raised:
            pt.check_server_steps(self.model, optimizer, spec)
        self.assertIn("steps 2 of the model's 4 trainable parameters", str(raised.exception))
        self.assertIn("0.weight", str(raised.exception))
        # The others frozen: what DDP reduces is what the optimizer steps.
        for p in self.model[0].parameters():
            p.requires_grad_(False)
        pt.check_server_steps(self.model, optimizer, spec)

    def test_what_overlap_forward_cannot_serve_is_refused(self):
        from types import SimpleNamespace

        from phub.server_optimizer import refuse_overlap
        ddp = SimpleNamespace(module=self.model, gradient_as_bucket_view=True)
        with self.assertRaises(ValueError) as raised:
            refuse_overlap(ddp, {})
        self.assertIn("gradient_as_bucket_view=True on CPU", str(raised.exception))
        ddp.gradient_as_bucket_view = False
        refuse_overlap(ddp, {})
        with self.assertRaises(ValueError) as raised:
            refuse_overlap(ddp, {"min_workers": 1, "max_workers": 2})
        self.assertIn("elastic job", str(raised.exception))

    def test_a_parameter_without_a_gradient_is_never_moved(self):
        import phub.torch as pt
        for optimizer, refused in [
                (torch.optim.SGD(self.model.parameters(), lr=0.1), False),
                (torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9), True),
                (torch.optim.SGD(self.model.parameters(), lr=0.1, weight_decay=1e-4), True),
                (torch.optim.Adam(self.model.parameters(), lr=1e-3), True)]:
            spec = pt.optimizer_spec(optimizer)
            pt.check_server_steps(self.model, optimizer, spec, find_unused_parameters=False)
            if refused:
                with self.assertRaises(ValueError) as raised:
                    pt.check_server_steps(self.model, optimizer, spec, find_unused_parameters=True)
                self.assertIn("find_unused_parameters=True", str(raised.exception))
            else:
                pt.check_server_steps(self.model, optimizer, spec, find_unused_parameters=True)


class FailureTest(unittest.TestCase):
    def check_phubd_lost(self, sig, expect, env=None):
        def signal_when_ready(phubd, out_dir):
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while not all(os.path.exists(os.path.join(out_dir, f"rank{r}.pt.ready"))
                          for r in range(2)):
                self.assertLess(time.monotonic(), deadline, "the ranks never started")
                time.sleep(0.05)
            phubd.kill(sig)

        for rank, r in enumerate(run("dead-phubd", 2, "--liveness-timeout-ms", "2000",
                                     during=signal_when_ready, env=env)):
            self.assertIsNotNone(r["error"], f"rank {rank} trained on without phubd")
            # DDP re-raises the hook's PhubError as a RuntimeError with its text first (not
            # "Unable to cast ... to Tensor", as a future failed by set_exception reads there).
            self.assertIn("phub ", r["error"])
            self.assertNotIn("Unable to cast", r["error"])
            self.assertIn(expect, r["error"])
            print(f"rank {rank}: {r['seconds']:.2f} s after the signal: {r['error'][:240]}")

    def test_killed_phubd_is_an_exception(self):
        self.check_phubd_lost(signal.SIGKILL, "UNAVAILABLE")

    def test_silent_phubd_is_an_exception(self):
        # Stopped: its connections stay open; the client's liveness deadline (2 s) finds it.
        self.check_phubd_lost(signal.SIGSTOP, "UNAVAILABLE")

    def test_dead_peer_is_an_exception(self):
        with tempfile.TemporaryDirectory(prefix="phub-ddp-") as out_dir, \
                Phubd(2, "--rejoin-timeout-ms", "0") as phubd:
            procs = launch_ranks(WORKER, ["dead-peer", out_dir], 2, phubd.address)
            (code0, out0), (code1, _) = wait_ranks(procs, RUN_TIMEOUT_S)
            self.assertEqual(code1, 3, "rank 1 was to crash")
            self.assertEqual(code0, 0, out0)
            r = torch.load(os.path.join(out_dir, "rank0.pt"))
            self.assertIsNotNone(r["error"], "rank 0 trained on without its peer")
            self.assertIn("stalled", r["error"])
            print(f"rank 0: {r['seconds']:.2f} s after step 3: {r['error'][:200]}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
