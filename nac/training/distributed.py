"""One code path for single-process and ``torchrun`` (DDP) training.

Under ``torchrun`` (``WORLD_SIZE > 1``) ``init_distributed`` joins the process group (NCCL on
CUDA, gloo on CPU) and pins each process to its local device; otherwise it returns a
world of one. Only rank 0 writes checkpoints, logs and metrics.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class World:
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device=cuda but no CUDA device is visible; use train.device=auto or cpu")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def init_distributed(device: str = "auto") -> World:
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    dev = resolve_device(device)
    if world_size == 1:
        return World(0, 1, dev)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if dev.type == "cuda":
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    return World(rank, world_size, dev)


def all_reduce_(t: torch.Tensor, op=None) -> torch.Tensor:
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
    return t


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
