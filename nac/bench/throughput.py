"""Figure 5b at the paper's size: inference throughput of the ``paper`` profile's Tiny-ImageNet NAC
(256 processor modules, ConvNeXt 3/3/9 tokenizer, 64 px, untrained weights: throughput does not
depend on them) against the fraction of processor modules dropped, on this CPU. What the
``throughput`` stage writes (metrics/costs/throughput.json) and ``bench/bench_throughput.py`` runs
with other settings.

For each fraction the model is pruned with ``nac.pruning.drop_modules`` (least connected first by
``random_connectivity``); two things are timed: ``executor``, the forward with the tokenizer's
output and the circuit design precomputed (what dropping modules can speed up), and ``whole``, the
whole model from uint8 images. Repeats are interleaved over the fractions (repeat r of every
fraction before repeat r + 1), so a change of machine load hits every point alike. Per timed repeat:
images/s by wall clock and by the process's CPU time (one thread: CPU seconds are the work done,
whatever other processes do); each point a mean and a 95% t CI, and a speed-up over 0% dropped
(ratio of means). Timings, not counts: they vary from run to run and machine to machine.
"""

from __future__ import annotations

import datetime
import os
import platform
import time

import torch

from nac.bench.models import paper_nac, pruned_forwards
from nac.bench.timing import ci
from nac.pruning import random_connectivity

KINDS = ("executor", "whole")


def measure(repeats: int, batch: int, fractions: list[float]) -> dict:
    """The rows of Figure 5b at the paper's size (0.0 is added to ``fractions`` when absent: the
    speed-ups are over it)."""
    fractions = fractions if fractions[0] == 0.0 else [0.0, *fractions]
    model, params = paper_nac()  # outside no_grad: the signature fit trains
    model.eval()
    m = params["image"]["model"]
    U = model.config.n_processor
    size = int(m["tokenizer"]["image_size"])
    x = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    ranking = random_connectivity(U, seed=0)
    rows = [{"dropped_fraction": f, "kept_modules": U - int(round(f * U))} for f in fractions]
    with torch.no_grad():
        fns = pruned_forwards(model, x, fractions, ranking)
        for f in fns.values():  # warm-up
            for fn in f.values():
                fn()
        wall = {(f, kind): [] for f in fractions for kind in KINDS}
        cpu = {(f, kind): [] for f in fractions for kind in KINDS}
        for _ in range(repeats):
            for f in fractions:
                for kind in KINDS:
                    t0, c0 = time.perf_counter(), time.process_time()
                    fns[f][kind]()
                    wall[(f, kind)].append(batch / (time.perf_counter() - t0))
                    cpu[(f, kind)].append(batch / (time.process_time() - c0))
    for row in rows:
        f = row["dropped_fraction"]
        for kind in KINDS:
            row[f"{kind}_images_per_s"] = ci(wall[(f, kind)])
            row[f"{kind}_images_per_cpu_s"] = ci(cpu[(f, kind)])
    base = rows[0]
    for row in rows:
        for kind in KINDS:
            for clock in ("images_per_s", "images_per_cpu_s"):
                row[f"{kind}_speedup_{clock}"] = row[f"{kind}_{clock}"]["mean"] / base[f"{kind}_{clock}"]["mean"]
    return {
        "model": "paper profile image.model, nac-scale_free (untrained weights)",
        "tokenizer": m["tokenizer"],
        "n_processor": U,
        "batch": batch,
        "image_size": size,
        "rows": rows,
    }


def figure5b(repeats: int, batch: int, fractions: list[float], threads: int = 1) -> dict:
    """``{"machine": {...}, "figure5b_paper_size": measure(...)}``, timed on ``threads`` CPU threads;
    the machine record holds the CPU, torch, the date and the load average before and after."""
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    res = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "repeats": repeats,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "load_average_start": list(os.getloadavg()),
        }
    }
    res["figure5b_paper_size"] = measure(repeats, batch, fractions)
    res["machine"]["load_average_end"] = list(os.getloadavg())
    res["machine"]["wall_s"] = time.perf_counter() - t0
    return res


def table(res: dict) -> str:
    """The rows as a Markdown table (images per CPU second with CIs, speed-ups, wall-clock means)."""
    lines = [
        "| dropped | modules | executor img/CPU-s | x | whole img/CPU-s | x "
        "| executor img/s (wall) | whole img/s (wall) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res["figure5b_paper_size"]["rows"]:
        e, w = r["executor_images_per_cpu_s"], r["whole_images_per_cpu_s"]
        lines.append(
            f"| {r['dropped_fraction']:.4g} | {r['kept_modules']} | {e['mean']:.1f} [{e['lo']:.1f}, {e['hi']:.1f}] | "
            f"{r['executor_speedup_images_per_cpu_s']:.2f} | {w['mean']:.1f} [{w['lo']:.1f}, {w['hi']:.1f}] | "
            f"{r['whole_speedup_images_per_cpu_s']:.2f} | {r['executor_images_per_s']['mean']:.1f} | "
            f"{r['whole_images_per_s']['mean']:.1f} |"
        )
    return "\n".join(lines)
