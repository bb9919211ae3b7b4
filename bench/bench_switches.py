"""The authors' model, switch by switch: the three mechanism switches of `docs/reference.md`
("Switches") measured on the image track, each turned alone away from the default, paired by seed
with the pipeline's own default NAC (`metrics/image/{train,eval}/nac-<prior>-<seed>.json`, same
seeds, same initialisation of every other parameter, same data order).

    python bench/bench_switches.py [--switches truncation_mode signature_fit matching] [--seeds 0 1 2]
                                   [--out bench/results/switches.json]

Each switch run trains `nac-<prior.name>` with the committed `params.yaml` except for one switch's model
keys (`SWITCHES`), in a scratch folder (its checkpoint is not the pipeline's), evaluates it as the
`train` stage does (IID validation, OOD, the kernel ablation) and records its mechanism numbers at
initialisation and at the end. The file records the params it ran under, so the report uses it only
while they are the committed ones. Several invocations may run side by side (one per core,
`--threads 1`): results are merged under a lock. Needs the prepared image data
(`dvc repro prepare@shapes prepare@shapes_r`). Not a test: a run takes about a minute and a half on
one CPU thread.
"""

from __future__ import annotations

import argparse
import copy
import fcntl
import json
import os
import platform
import time
from pathlib import Path

import torch

from nac.bench.scratch import train_in_scratch
from nac.pipeline.io import write_json
from nac.pipeline.params import read_params
from nac.report.switches import SWITCHES, bench_params

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--switches", nargs="+", default=list(SWITCHES), choices=list(SWITCHES))
    ap.add_argument("--seeds", nargs="+", type=int, default=None, help="default: params.yaml's seeds")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="bench/results/switches.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    params = read_params(ROOT / "params.yaml")
    data_root = (ROOT / params["data"]["root"]).resolve()
    run = f"nac-{params['prior']['name']}"
    machine = {
        "platform": platform.platform(),
        "torch": torch.__version__,
        "threads": args.threads,
        "cpus": os.cpu_count(),
    }
    for name in args.switches:
        changes, value = SWITCHES[name]["set"], SWITCHES[name]["value"]
        for seed in args.seeds if args.seeds is not None else params["seeds"]:
            p = copy.deepcopy(params)
            p["image"]["model"].update(changes)
            p["data"]["root"] = str(data_root)
            res, ev, wall = train_in_scratch(p, run, seed)
            entry = {
                "run": run,
                "set": changes,
                "value": value,
                "eval": {k: v for k, v in ev.items() if k not in ("run", "seed")},
                "mechanism": res.get("mechanism"),
                "val_acc1": [h["val_acc1"] for h in res["history"]],
                "wall_s": round(wall, 1),
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            _merge(ROOT / args.out, name, seed, entry, machine, params)
            print(
                f"{name}={value} {run} seed {seed}: IID Acc@1 {ev['iid_acc1']:.1f}, OOD {ev['ood_acc1']:.1f} "
                f"({wall:.0f} s)",
                flush=True,
            )


def _merge(out_path: Path, name: str, seed: int, entry: dict, machine: dict, params: dict) -> None:
    """Add one result to the JSON file, under an exclusive lock (runs may go side by side). A file
    written under other params is started afresh: its runs would not pair with this pipeline's."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with open(out_path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results = json.loads(out_path.read_text()) if out_path.exists() else {}
        if results.get("params") != bench_params(params):
            results = {}
        results.update(machine=machine, profile=params["profile"], params=bench_params(params))
        results.setdefault("switches", {}).setdefault(name, {})[str(seed)] = entry
        write_json(out_path, results)  # atomic: temporary file + rename


if __name__ == "__main__":
    main()
