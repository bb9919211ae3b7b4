"""The `converged` profile's track stages on the machine at hand, one stage at a time (what a CPU
can run of the profile in a session; the whole profile is `python tools/run_converged.py`).

    python bench/bench_converged_tracks.py [--tracks text points] [--workdir build/converged_tracks]
                                           [--out bench/results/converged_tracks.json]

Per track: the checkout copied into ``<workdir>/<track>`` (``tools/run_converged.py``'s
``copy_checkout``; a DVC project of its own), ``profile=converged`` composed there, ``dvc repro
train_<track>`` (resumes; a finished stage is not rerun), then NAC − Perceiver IO test Acc@1 paired
by seed (the `*_gap` claims' inputs, ``nac.stats.paired_ci``) and the plateau check (validation
Acc@1 at the last epoch minus 10 epochs before, per seed, from the dvclive logs). Not a pipeline
stage, and not in the report: a partial converged answer, kept with its commit and times.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from run_converged import prepare_workdir  # noqa: E402

from nac.provenance import git_commit  # noqa: E402
from nac.stats import mean_ci, paired_ci  # noqa: E402


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_track(track: str, work: Path) -> dict:
    """``dvc repro train_<track>`` under ``profile=converged`` in ``work``; its start and end."""
    run = prepare_workdir(work, "converged", [])
    status = subprocess.run(["dvc", "status", f"train_{track}"], cwd=work, capture_output=True, text=True)
    start = _now()
    run("dvc", "repro", f"train_{track}")
    return {"start": start, "end": _now(), "ran": "up to date" not in status.stdout}


def summarise(track: str, work: Path) -> dict:
    """Per run: test Acc@1 per seed with a t CI and the plateau moves; NAC − Perceiver IO paired."""
    runs: dict[str, dict[int, dict]] = {}
    for f in sorted((work / "metrics" / "tracks" / track).glob("*.json")):
        d = json.loads(f.read_text())
        runs.setdefault(d["run"], {})[d["seed"]] = d
    seeds = sorted(set.intersection(*(set(v) for v in runs.values())))
    out: dict = {"seeds": seeds}
    for run, by_seed in runs.items():
        acc = [by_seed[s]["test_acc1"] for s in seeds]
        iv = mean_ci(acc)
        moves = []
        for s in seeds:
            tsv = work / "metrics" / "tracks" / "live" / track / f"{run}-{s}" / "plots" / "metrics" / "val" / "acc1.tsv"
            vals = [float(r["acc1"]) for r in csv.DictReader(tsv.open(), delimiter="\t")] if tsv.exists() else []
            if len(vals) > 10:
                moves.append(round(vals[-1] - vals[-11], 3))
        out[run] = {"test_acc1": acc, "mean": iv.estimate, "ci95": [iv.lo, iv.hi], "val_move_last_10_epochs": moves}
    if "nac" in runs and "perceiver_io" in runs:
        d = paired_ci(out["nac"]["test_acc1"], out["perceiver_io"]["test_acc1"])
        out["nac_minus_perceiver_io"] = {"d": d.estimate, "ci95": [d.lo, d.hi], "n": d.n}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tracks", nargs="+", default=["text", "points"], choices=["points", "listops", "text", "nlvr"])
    ap.add_argument("--workdir", default=str(ROOT / "build" / "converged_tracks"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "converged_tracks.json"))
    args = ap.parse_args()
    out_path = Path(args.out)
    results = json.loads(out_path.read_text()) if out_path.exists() else {"tracks": {}}
    for track in args.tracks:
        work = Path(args.workdir) / track
        times = run_track(track, work)
        prev = results["tracks"].get(track, {})
        if not times.pop("ran") and "start" in prev:  # the stage was up to date: keep the run's own times
            times = {"start": prev["start"], "end": prev["end"], "commit": prev["commit"]}
        results["tracks"][track] = {"commit": git_commit(ROOT), **times, **summarise(track, work)}
    results["machine"] = {"platform": platform.platform(), "cpus": os.cpu_count(), "device": "cpu"}
    out_path.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps({t: v.get("nac_minus_perceiver_io") for t, v in results["tracks"].items()}, indent=1))


if __name__ == "__main__":
    main()
