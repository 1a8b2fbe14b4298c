"""PHub behind PyTorch's DistributedDataParallel (docs/torch.md).

Gradient averaging through phubd (its summation mode), a two-line change to a DDP script:

    model = DistributedDataParallel(model)
    state = phub.torch.connect(model)                        # PHUB_ADDRESS, RANK, WORLD_SIZE
    model.register_comm_hook(state, phub.torch.allreduce_hook)

Or the PHub design, phubd's fused optimizer steps the weights and the workers receive weights:

    model = DistributedDataParallel(model)
    optimizer = phub.torch.ServerOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1))

How the hook works: ddp_hook.py; the optimizer: server_optimizer.py.
"""
# The pieces live in modules of their own: the hook's state (ddp_hook.py) and the server-side
# optimizer that uses it (server_optimizer.py); this module is their public face.
from phub.ddp_hook import PhubState, allreduce_hook, connect  # noqa: F401
from phub.elastic import ElasticBatches, local_process_group  # noqa: F401
from phub.server_optimizer import (ServerOptimizer, check_server_steps,  # noqa: F401
                                   optimizer_spec)

__all__ = ["PhubState", "connect", "allreduce_hook", "ServerOptimizer", "optimizer_spec",
           "ElasticBatches", "local_process_group"]
