"""Benchmark (not a test): Figure 5b at the paper's size (``nac.bench.throughput``: the paper-profile
Tiny-ImageNet NAC pruned over the prune sweep's grid, executor and whole model timed on the CPU),
with settings of your choice. The ``throughput`` DVC stage runs the same measurement with
``costs.throughput``'s settings into metrics/costs/throughput.json, which the report reads.

    python bench/bench_throughput.py [--repeats 5] [--threads 1] [--batch 32] [--fractions ...]
                                     [--out bench/results/throughput.json]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from nac.bench.throughput import figure5b, table
from nac.pipeline.io import write_json
from nac.pipeline.params import read_params

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--fractions", type=float, nargs="*", help="default: params.yaml prune.dropped_fraction")
    ap.add_argument("--out", default="bench/results/throughput.json")
    a = ap.parse_args()
    fractions = a.fractions or [float(f) for f in read_params(ROOT / "params.yaml")["prune"]["dropped_fraction"]]
    res = figure5b(a.repeats, a.batch, fractions, a.threads)
    write_json(a.out, res)
    m = res["machine"]
    print(
        f"threads={m['threads']} repeats={a.repeats} wall={m['wall_s']:.0f}s "
        f"load {m['load_average_start'][0]:.1f} -> {m['load_average_end'][0]:.1f}"
    )
    print(table(res))


if __name__ == "__main__":
    main()
