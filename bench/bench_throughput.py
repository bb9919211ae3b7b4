"""Benchmark (not a test): Figure 5b at the paper's size - inference throughput against the
fraction of processor modules dropped, over the prune sweep's grid (``prune.dropped_fraction``
of params.yaml, the composed profile's), for the paper-profile Tiny-ImageNet NAC (256 processor
modules, ConvNeXt 3/3/9 tokenizer, 64 px, untrained weights: throughput does not depend on
them), one CPU thread by default.

For each fraction the model is pruned with ``nac.pruning.drop_modules`` (least connected first
by ``random_connectivity``, as bench/bench_paper.py (c)); two things are timed:

* ``executor``: the forward with the tokenizer's output and the circuit design precomputed
  (what dropping modules can speed up);
* ``whole``: the whole model from uint8 images.

Repeats are interleaved over the fractions (repeat r times every fraction before repeat r + 1),
so a change of machine load hits every point alike. Per timed repeat we record images/s by
wall clock and by the process's CPU time (``time.process_time``: one thread, so CPU seconds are
the work done, unaffected by other processes' load); each point gets a mean and a 95% Student t
CI (``nac.report.stats.mean_ci``), and a speed-up over 0% dropped (ratio of means).

    python bench/bench_throughput.py [--repeats 5] [--threads 1] [--batch 32]
                                     [--out bench/results/throughput.json]

Writes JSON (machine, torch version, threads, date and load inside) that the report's
``figure_5b_paper_size`` draws.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import time
from pathlib import Path

import torch

from nac.bench.models import paper_nac, pruned_forwards
from nac.bench.timing import ci as _ci
from nac.pipeline.params import read_params

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("executor", "whole")


def grid(params_file: Path = ROOT / "params.yaml") -> list[float]:
    """The prune sweep's dropped fractions (params.yaml ``prune.dropped_fraction``)."""
    return [float(f) for f in read_params(params_file)["prune"]["dropped_fraction"]]


def measure(repeats: int, batch: int, fractions: list[float]) -> dict:
    from nac.pruning import random_connectivity

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
            row[f"{kind}_images_per_s"] = _ci(wall[(f, kind)])
            row[f"{kind}_images_per_cpu_s"] = _ci(cpu[(f, kind)])
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--fractions", type=float, nargs="*", help="default: params.yaml prune.dropped_fraction")
    ap.add_argument("--out", default="bench/results/throughput.json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    fractions = a.fractions or grid()
    if fractions[0] != 0.0:
        fractions = [0.0, *fractions]
    t0 = time.perf_counter()
    res = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "repeats": a.repeats,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "load_average_start": list(os.getloadavg()),
        }
    }
    res["figure5b_paper_size"] = measure(a.repeats, a.batch, fractions)
    res["machine"]["load_average_end"] = list(os.getloadavg())
    res["machine"]["wall_s"] = time.perf_counter() - t0
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(
        f"threads={torch.get_num_threads()} repeats={a.repeats} wall={res['machine']['wall_s']:.0f}s "
        f"load {res['machine']['load_average_start'][0]:.1f} -> {res['machine']['load_average_end'][0]:.1f}"
    )
    print(
        "| dropped | modules | executor img/CPU-s | x | whole img/CPU-s | x "
        "| executor img/s (wall) | whole img/s (wall) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in res["figure5b_paper_size"]["rows"]:
        e, w = r["executor_images_per_cpu_s"], r["whole_images_per_cpu_s"]
        print(
            f"| {r['dropped_fraction']:.4g} | {r['kept_modules']} | {e['mean']:.1f} [{e['lo']:.1f}, {e['hi']:.1f}] | "
            f"{r['executor_speedup_images_per_cpu_s']:.2f} | {w['mean']:.1f} [{w['lo']:.1f}, {w['hi']:.1f}] | "
            f"{r['whole_speedup_images_per_cpu_s']:.2f} | {r['executor_images_per_s']['mean']:.1f} | "
            f"{r['whole_images_per_s']['mean']:.1f} |"
        )


if __name__ == "__main__":
    main()
