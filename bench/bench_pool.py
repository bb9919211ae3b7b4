"""Benchmark (not a test): what ``nac.pipeline.pool`` buys on a CPU. One training job of the image
track on all threads and on one thread (what a second intra-op thread gives), then two jobs one
after the other on all threads in one process (the stages before the pool, minus their per-stage
start-up) against side by side in two worker processes with one thread each (the pool).

    python bench/bench_pool.py [--runs nac-scale_free] [--epochs 6] [--repeats 1]

Needs the prepared image data (``dvc repro prepare@shapes prepare@shapes_r``). Each configuration
trains the run (seed 0, or seeds 0 and 1) from scratch in a temporary folder (the repository's
``models/`` and ``metrics/`` are not touched) with ``params.yaml``'s settings and ``--epochs``
epochs, and is timed as a whole (start-up, training, evaluation). Writes
``bench/results/pool.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from nac.pipeline.params import read_params
from nac.pipeline.pool import usable_cores

ROOT = Path(__file__).resolve().parents[1]

_JOB = """
import sys
from nac.pipeline.params import load_params
from nac.pipeline.pool import run_jobs
from functools import partial

from nac.pipeline.schema_models import section
from nac.tracks.image import train_image_run
params = load_params()
run, seeds = sys.argv[1], [int(s) for s in sys.argv[2:]]
job = partial(train_image_run, section(params, "image"), data=params["data"], device="cpu", metrics="metrics")
run_jobs(job, [(run, s) for s in seeds], device="cpu", desc="bench")
"""


def _workdir(epochs: int) -> Path:
    params = read_params(ROOT / "params.yaml")
    params["image"]["train"]["epochs"] = epochs
    params["image"]["train"]["warmup_epochs"] = min(params["image"]["train"].get("warmup_epochs", 0), epochs / 2)
    tmp = Path(tempfile.mkdtemp(prefix="bench_pool_"))
    (tmp / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    root = Path(params["data"].get("root", "data"))
    for ds in (params["image"]["dataset"], params["image"]["ood_dataset"]):
        src = ROOT / root / "cache" / ds
        if not src.exists():
            raise SystemExit(f"{src} is missing; run `dvc repro prepare@{ds}` first")
        (tmp / root / "cache").mkdir(parents=True, exist_ok=True)
        os.symlink(src, tmp / root / "cache" / ds)
    return tmp


def time_config(run: str, epochs: int, workers: int, threads: int, seeds: list[int]) -> float:
    tmp = _workdir(epochs)
    env = dict(os.environ, NAC_WORKERS=str(workers), NAC_THREADS=str(threads), PYTHONPATH=str(ROOT))
    try:
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", _JOB, run, *map(str, seeds)],
            cwd=tmp,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        return time.perf_counter() - t
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"bench job failed:\n{e.stderr[-3000:]}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", default=["nac-scale_free"])
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default="bench/results/pool.json")
    a = ap.parse_args()
    cores = usable_cores()
    configs = {
        "one job, all threads": (1, cores, [0]),
        "one job, one thread": (1, 1, [0]),
        "two jobs one after another, all threads": (1, cores, [0, 1]),
        "two jobs side by side, one thread each": (2, 1, [0, 1]),
    }
    res: dict = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": cores,
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "epochs": a.epochs,
        "runs": {},
    }
    for run in a.runs:
        times: dict[str, list[float]] = {name: [] for name in configs}
        for _ in range(a.repeats):  # interleaved, so drift of the machine hits both alike
            for name, (workers, threads, seeds) in configs.items():
                times[name].append(time_config(run, a.epochs, workers, threads, seeds))
        one_all, one_1, seq, par = (statistics.median(times[n]) for n in configs)
        res["runs"][run] = {
            "seconds": times,
            "second_thread_speedup": one_1 / one_all,
            "side_by_side_speedup": seq / par,
        }
        print(
            f"{run}, {a.epochs} epochs: one job {one_all:.1f} s on {cores} threads, {one_1:.1f} s on one "
            f"(x{one_1 / one_all:.2f}); two jobs one after another on {cores} threads {seq:.1f} s, side by side on "
            f"one thread each {par:.1f} s (x{seq / par:.2f})",
            flush=True,
        )
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
