"""Where the graphed training step's time goes (issue 51), at the paper's Tiny-ImageNet size, bf16,
batch 128, on a CUDA device: per step the device time of the matching's ``P`` (computed eagerly
before the graphs), of graph 1 (forward and cross-entropy backward) and graph 2 (the regularizer's
gradient, clipping and AdamW), the host's wait for the matching after graph 1 is launched, and the
wall time (medians of 20 steps after 5, the capture among them); then the eager step's wall time on
the same run. Run on the GPU machine (``$OUT/probe.json``):

    python bench/bench_graphed_parts.py

Its one run so far: bench/results/gpu_window_2026-11-28.json (``calls[1].probe``), run there as an
untracked copy named probe_graphed.py: the same code, since reformatted.
"""

import json
import os
import statistics as st
import time

import torch

from nac.bench.models import Synthetic, inputs
from nac.bench.step_ops import pairs
from nac.training import loop
from nac.training.config import TrainConfig
from nac.training.distributed import World
from nac.training.run import EpochState, build_run

dev = torch.device("cuda")
models, px, classes, train = pairs(["tiny"])["tiny"]
out = {}
for name in ("nac-scale_free", "perceiver_io"):
    tr = dict(train, epochs=1, warmup_epochs=0, batch_size=128, augment=False, num_workers=0, ema=None, device="cuda")
    tr["cuda_graphs"] = True
    tr.pop("lr_batch_scaling", None)
    data_set, world = Synthetic(128, px, classes), World(0, 1, dev)
    run = build_run(models[name], data_set, None, TrainConfig.from_dict(tr), world, None, "p", None, None)
    now = EpochState.of(run)  # the epoch's metric sums, as fit makes them
    x, y = inputs(128, px, dev, classes)
    batch = {"input": x, "label": y}
    for i in range(5):
        loop.train_step(run, now, batch, 0, i)
    torch.cuda.synchronize()
    g = run.graphed
    rows = []
    for i in range(20):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        t0 = time.perf_counter()
        ev[0].record()
        pending = run.objective.matching_in_advance() if g.matching else None
        ev[1].record()
        g.graphs[0].replay()
        ev[2].record()
        t1 = time.perf_counter()
        if g.matching:
            g.static["perms"].copy_(pending[1].result(), non_blocking=True)
            t2 = time.perf_counter()
            g.graphs[1].replay()
        else:
            t2 = t1
        ev[3].record()
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        rows.append(
            {
                "p_ms": ev[0].elapsed_time(ev[1]),
                "g1_ms": ev[1].elapsed_time(ev[2]),
                "g2_ms": ev[2].elapsed_time(ev[3]),
                "host_wait_ms": 1e3 * (t2 - t1),
                "wall_ms": 1e3 * (t3 - t0),
            }
        )
    out[name] = {k: st.median(r[k] for r in rows) for k in rows[0]}
    print(name, {k: round(v, 2) for k, v in out[name].items()}, flush=True)
    run.graphed = None  # the eager step on the same run
    for i in range(3):
        loop.train_step(run, now, batch, 0, i)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(10):
        loop.train_step(run, now, batch, 0, i)
    torch.cuda.synchronize()
    out[name]["eager_wall_ms"] = 1e3 * (time.perf_counter() - t0) / 10
    print(name, "eager wall", round(out[name]["eager_wall_ms"], 1), flush=True)
with open(os.path.join(os.environ.get("OUT", "/tmp"), "probe.json"), "w") as f:
    json.dump(out, f, indent=1)
