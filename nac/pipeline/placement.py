"""Where a stage's worker processes run: one or more workers per device, each pinned to it.

``NAC_DEVICES`` lists the devices (default: every visible GPU when the stage trains on a GPU;
none on a CPU, where workers are not pinned): GPU indices (``0,1`` or ``cuda:0,cuda:1``, counted
in the stage's own ``CUDA_VISIBLE_DEVICES``) or CPU cores (``cpu:0,cpu:1``: the N-th core this
process may use; a fake device on a machine without GPUs, which is how the tests place jobs on
two devices). ``NAC_JOBS_PER_GPU`` workers share each device (default 1; several small jobs fill
one GPU). Worker ``k`` is pinned to device ``k mod len(devices)``: a GPU worker sees only its GPU
(``CUDA_VISIBLE_DEVICES`` set before CUDA starts in it, so the params' ``device: cuda`` is that
GPU), a CPU worker runs on its core (``sched_setaffinity``). Results do not depend on placement:
every job seeds itself and runs the same code with the same thread count on any device of a kind.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from nac.pipeline.envvars import EnvError, positive_int, raw

DEVICES_ENV, PER_GPU_ENV = "NAC_DEVICES", "NAC_JOBS_PER_GPU"
PLACED_ENV = "NAC_DEVICE"  # set in a pinned worker: the device it runs on (e.g. cuda:1, cpu:0)
_ENTRY = re.compile(r"(?:(cuda|cpu):)?([0-9]+)")


@dataclass(frozen=True)
class Slot:
    """One device a worker is pinned to: ``kind`` ``cuda`` or ``cpu``, ``index`` as the user
    counts it, ``target`` what pinning sets (the physical GPU id for ``CUDA_VISIBLE_DEVICES``,
    or the CPU core number)."""

    kind: str
    index: int
    target: str

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.index}"


def _usable_cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def _visible_gpus() -> list[str]:
    """Physical ids of the GPUs this process sees, in CUDA's order."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() != "":
        return [v.strip() for v in visible.split(",") if v.strip()]
    import torch  # deferred: the data stages run without torch (~1.2 s; tests/test_dvc_deps.py)

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def devices(on_gpu: bool) -> list[Slot]:
    """The devices to pin workers to (``NAC_DEVICES``, else every visible GPU when ``on_gpu``)."""
    value = raw(DEVICES_ENV)
    if value is None:
        return [Slot("cuda", i, g) for i, g in enumerate(_visible_gpus())] if on_gpu else []
    form = "valid form: GPU indices (0,1 or cuda:0,cuda:1) or CPU cores (cpu:0,cpu:1); unset for every visible GPU"
    slots = []
    for entry in value.split(","):
        m = _ENTRY.fullmatch(entry.strip())
        if m is None:
            raise EnvError(f"{DEVICES_ENV}={value!r}: cannot read {entry.strip()!r}; {form}")
        kind, index = m.group(1) or "cuda", int(m.group(2))
        if kind == "cpu":
            cores = _usable_cores()
            if index >= len(cores):
                raise EnvError(
                    f"{DEVICES_ENV}={value!r}: cpu:{index} does not exist, this process may use "
                    f"{len(cores)} CPU core(s) (cpu:0 to cpu:{len(cores) - 1})"
                )
            slots.append(Slot("cpu", index, str(cores[index])))
        else:
            gpus = _visible_gpus()
            if index >= len(gpus):
                visible = "CUDA_VISIBLE_DEVICES" in os.environ
                raise EnvError(
                    f"{DEVICES_ENV}={value!r}: cuda:{index} is not visible ({len(gpus)} GPU(s) visible"
                    f"{', CUDA_VISIBLE_DEVICES=' + os.environ['CUDA_VISIBLE_DEVICES'] if visible else ''})"
                )
            slots.append(Slot("cuda", index, gpus[index]))
    if len({s.name for s in slots}) != len(slots):
        raise EnvError(
            f"{DEVICES_ENV}={value!r} names a device twice; to run several jobs on one device set {PER_GPU_ENV}"
        )
    return slots


def jobs_per_device() -> int:
    return positive_int(PER_GPU_ENV, "2 (two small jobs share each GPU)") or 1


def assign(slots: list[Slot], n_workers: int) -> list[Slot | None]:
    """The device of each of ``n_workers`` workers: round-robin over ``slots`` (None: unpinned)."""
    if not slots:
        return [None] * n_workers
    return [slots[k % len(slots)] for k in range(n_workers)]


def pin(slot: Slot | None) -> None:
    """Pin the calling process to ``slot``: before CUDA starts in it (a fresh worker), a GPU slot
    sets ``CUDA_VISIBLE_DEVICES`` to that GPU alone; once CUDA runs (the stage's own process),
    it selects the device; a CPU slot sets the process's affinity to its core."""
    if slot is None:
        return
    os.environ[PLACED_ENV] = slot.name
    if slot.kind == "cpu":
        os.sched_setaffinity(0, {int(slot.target)})
        return
    import torch  # deferred: the data stages run without torch (~1.2 s; tests/test_dvc_deps.py)

    if torch.cuda.is_initialized():
        torch.cuda.set_device(slot.index)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = slot.target
