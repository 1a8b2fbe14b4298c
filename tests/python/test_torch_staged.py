#!/usr/bin/python3
"""phub.torch's staged path (phub.DeviceClient: what a GPU model goes through) on CPU tensors,
PHUB_STAGED=1, against DDP's own gloo: the hook, the server optimizer, its schedule, weights in
the next forward, the optimizer's state saved and restored, a job mixing staged and unstaged
ranks, elastic jobs, the c10d backend, and phubd lost. The same Python as on a GPU (device_streams.py holds what
differs) and the same C++ pipeline, through the host engine. With PHUB_TEST_DEVICE=cuda
(run_gpu.sh pytests) the models are on GPU 0 and the same tests run the CUDA path itself.
Tensors are cut into 64 KiB segments, so the largest (64 x 5408 floats) goes as 22. Exits 77
(ctest: skipped) without torch."""
import os
import signal
import sys
import time
import unittest

try:
    import torch  # noqa: F401 - test_torch_ddp uses it; imported first for the skip
except ImportError:
    print("SKIP: python3-torch is not installed (deploy/install-deps.sh --torch installs it)")
    sys.exit(77)

import phub
import test_torch_ddp as ddp
import test_torch_elastic as elastic
from phub_testing import Phubd
from test_torch_ddp import assert_all_close, run

SEGMENT = "65536"
STAGED = {"PHUB_STAGED": "1", "PHUB_SEGMENT_BYTES": SEGMENT}
# ddp_worker's model: 6 parameters, the Linear(5408, 64)'s weight cut into 22 segments.
STAGED_TENSORS = 5 + 22


class StagedHookTest(unittest.TestCase):
    def test_averaged_gradients_equal_gloo(self):
        started = []

        def job_started(phubd, _):
            deadline = time.monotonic() + ddp.RUN_TIMEOUT_S
            while not started and time.monotonic() < deadline:
                started.extend(line for line in phubd.log().splitlines() if " started: " in line)
                time.sleep(0.05)

        results = run("grads", 2, during=job_started, env=STAGED)
        self.assertTrue(started, "phubd never said the job started")
        self.assertIn(f" {STAGED_TENSORS} tensors", started[0],
                      "phubd did not see the segments: the staged client did not run")
        for rank, r in enumerate(results):
            for step, (gloo, ours) in enumerate(zip(r["gloo"], r["phub"])):
                assert_all_close(ours, gloo, 1e-5, 1e-7, f"staged rank {rank} iteration {step}")
            assert_all_close(r["phub"][-1], results[0]["phub"][-1], 0, 0, f"rank {rank} vs 0")

    def test_training_equals_gloo(self):
        for rank, r in enumerate(run("train", 2, env=STAGED)):
            assert_all_close(r["phub"], r["gloo"], 1e-4, 1e-6, f"staged rank {rank}")

    check_compact_wire = ddp.HookTest.check_compact_wire

    def test_a_compact_wire_trains_within_its_rounding_of_gloo(self):
        # The staged client converts its staged copies (segments) to bf16 on the CPU.
        self.check_compact_wire(env=STAGED)


class StagedServerOptimizerTest(unittest.TestCase):
    def test_momentum_and_adam(self):
        for kind in ("momentum", "adam"):
            results = run(f"server-{kind}", 2, env=STAGED)
            for rank, r in enumerate(results):
                assert_all_close(r["server"], r["local"], 1e-4, 1e-6, f"staged {kind} {rank}")
                assert_all_close(r["server"], results[0]["server"], 0, 0, f"{kind} rank {rank}")

    def test_a_schedule_reaches_phubd(self):
        # per_iteration_values through the staged client: step_with before each first bucket.
        for rank, r in enumerate(run("scheduled-momentum", 2, env=STAGED)):
            self.assertEqual(r["lrs"]["server"], r["lrs"]["local"])
            assert_all_close(r["server"], r["local"], 1e-4, 1e-6, f"staged schedule {rank}")

    check_state = ddp.ServerOptimizerTest.check_state

    def test_momentum_and_adam_state_round_trip_bitwise(self):
        # state_dict()/load_state_dict() through the staged client: phubd holds the state by
        # segment (the Linear's weight as 22), the script sees it by parameter.
        for kind in ("momentum", "adam"):
            self.check_state(kind, env=STAGED)

    def test_weights_in_the_next_forward_are_bitwise_the_same(self):
        for rank, r in enumerate(run("overlap-momentum", 2, env=STAGED)):
            self.assertEqual(r["losses"]["lazy"], r["losses"]["plain"], f"rank {rank}")
            assert_all_close(r["lazy"], r["plain"], 0, 0, f"staged overlap, rank {rank}")


class StagedC10dTest(unittest.TestCase):
    """init_process_group("phub") with the slots in the staged client (a GPU's way)."""

    check_c10d = ddp.C10dTest.check_c10d

    def test_plain_ddp_through_the_phub_backend_equals_gloo(self):
        self.check_c10d(env=STAGED, client="DeviceClient")


@unittest.skipIf(os.environ.get("PHUB_TEST_DEVICE") == "cuda",
                 "a CUDA rank is always staged: the mix is a CPU rank's choice, tested on CPU")
class MixedJobTest(unittest.TestCase):
    def test_staged_and_unstaged_ranks_agree_on_whole_tensors(self):
        # A CPU rank in a GPU rank's job: with segments off both send whole tensors.
        def env(rank):
            return {"PHUB_STAGED": "1" if rank == 0 else "0", "PHUB_SEGMENT_BYTES": "0"}
        for rank, r in enumerate(run("train", 2, env=env)):
            assert_all_close(r["phub"], r["gloo"], 1e-4, 1e-6, f"mixed rank {rank}")

    def test_segments_on_one_rank_only_are_refused_naming_the_fix(self):
        def env(rank):
            return {"PHUB_STAGED": "1" if rank == 0 else "0", "PHUB_SEGMENT_BYTES": SEGMENT}
        results = run("connect-only", 2, "--form-timeout-ms", "3000", env=env)
        errors = [r["error"] for r in results]
        refused = [e for e in errors if e and "tensors, rank" in e]
        self.assertEqual(len(refused), 1, errors)
        self.assertIn("PHUB_STAGED=1", refused[0])
        self.assertIn("PHUB_SEGMENT_BYTES", refused[0])


class StagedFailureTest(unittest.TestCase):
    """phubd killed or silent under the staged client: DeviceClient's errors reach DDP."""

    check_phubd_lost = ddp.FailureTest.check_phubd_lost

    def test_killed_phubd_is_an_exception(self):
        self.check_phubd_lost(signal.SIGKILL, "UNAVAILABLE", env=STAGED)

    def test_silent_phubd_is_an_exception(self):
        self.check_phubd_lost(signal.SIGSTOP, "UNAVAILABLE", env=STAGED)


class StagedElasticTest(unittest.TestCase):
    """Elastic jobs through the staged client (PHUB_STAGED=1 for every ServerOptimizer the
    elastic tests make, and for their child processes): a joiner's weights and iteration, lr
    scaling, a planned leave, an exit before and after the data ran out. With
    PHUB_TEST_DEVICE=cuda their models are on GPU 0 (test_torch_elastic.DEVICE)."""

    join_and_step = elastic.JoinTest.join_and_step
    exit_then_join = elastic.ExitTest.exit_then_join

    def setUp(self):
        self._saved = os.environ.get("PHUB_STAGED")
        os.environ["PHUB_STAGED"] = "1"

    def tearDown(self):
        if self._saved is None:
            os.environ.pop("PHUB_STAGED", None)
        else:
            os.environ["PHUB_STAGED"] = self._saved

    def test_the_elastic_optimizer_is_staged(self):
        with Phubd(2) as phubd:
            _, opt = elastic.elastic_optimizer(phubd.address, 1, 0)
            self.assertTrue(opt.phub.staged)
            self.assertIsInstance(opt.phub.client, phub.DeviceClient)
            opt.close()

    def test_a_joiner_gets_the_jobs_weights_and_iteration(self):
        self.join_and_step({})

    def test_linear_lr_scaling_doubles_the_step_at_two_members(self):
        self.join_and_step({"lr_scaling": "linear", "momentum": 0.0}, scale=2.0)

    def test_a_planned_leave_skips_no_batch(self):
        elastic.LeaveTest.test_a_planned_leave_ends_the_leavers_batches_and_skips_none(self)

    def test_an_exit_before_the_data_ran_out_is_a_loss_and_after_it_a_goodbye(self):
        elastic.ExitTest.test_an_exit_before_the_data_ran_out_is_a_loss_and_after_it_a_goodbye(
            self)


if __name__ == "__main__":
    unittest.main(verbosity=2)
