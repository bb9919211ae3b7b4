"""``nac.bench.opcount`` counts the step's thread only: the matching's worker thread does host
work in parallel with the step (its numpy and scipy calls, its copies), which CUDA's step does
not wait on; counted, it lands in whatever part the step's thread is in at that moment, so the
counts would change from run to run."""

from __future__ import annotations

import threading
from contextlib import ExitStack

import torch

from nac.bench import opcount


def _host_work(x: torch.Tensor) -> None:
    (x * 2).numpy()
    x.tolist()
    x.to("cpu")
    torch.tensor([1.0], device=torch.device("cpu"))


def test_the_counter_counts_the_step_thread_and_not_a_worker_thread():
    x = torch.randn(4)
    t = opcount.Tracker()
    with ExitStack() as stack:
        opcount.host_patches(t, stack)
        with opcount.OpCounter(t), t.within("regularizer"):
            worker = threading.Thread(target=_host_work, args=(x,))
            worker.start()
            worker.join()
            assert sum(t.ops.values()) == 0 and not t.syncs and not t.host  # the worker's: none counted
            _host_work(x)  # the same on the step's thread: counted
    assert t.ops["regularizer"] > 0 and t.host == {"regularizer": 1}
    assert t.sync_kinds == {
        "regularizer: tolist": 1,
        "regularizer: copy to host (.to('cpu'))": 1,
        "regularizer: blocking copy from host (torch.tensor(..., device=))": 1,
    }
