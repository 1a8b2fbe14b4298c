"""A script that knows nothing of PHub but the backend's name: phub.run registers it."""
import torch
import torch.distributed as dist

dist.init_process_group("phub")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: backend {dist.get_backend()}, "
      f"sum {float(total)}", flush=True)
dist.barrier()
