"""DVC stage throughput: Figure 5b at the paper's size on this CPU (``nac.bench.throughput``): the
``paper`` profile's Tiny-ImageNet NAC (256 modules, untrained) pruned at each of
``prune.dropped_fraction``, its executor and whole forward timed (``costs.throughput``: repeats,
batch, threads) -> <metrics>/costs/throughput.json, which the report's Figure 5b (paper size) and
the ``prune_speedup`` claim read. Timings: they change from run to run (the file records the
machine, the date and the load average)."""

from __future__ import annotations

import argparse

from nac.bench.throughput import figure5b, table
from nac.pipeline.io import write_json
from nac.pipeline.lifeline import run_stage
from nac.pipeline.params import load_params
from nac.pipeline.paths import add_root_arguments, paper_throughput


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_root_arguments(ap, "metrics")
    a = ap.parse_args(argv)
    params = load_params(stage="throughput")
    t = params["costs"]["throughput"]
    fractions = [float(f) for f in params["prune"]["dropped_fraction"]]
    res = figure5b(int(t["repeats"]), int(t["batch"]), fractions, int(t["threads"]))
    write_json(paper_throughput(a.metrics), res)
    print(table(res))


if __name__ == "__main__":
    run_stage(main, "throughput", kept="the previous timings are untouched (written at once, at the end); rerun")
