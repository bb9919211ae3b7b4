"""Validation curves of the other tracks trained longer than mini (issue 22: the converged profile's
lengths). Trains one run and seed of a track with the committed mini settings except the epochs
(the cosine schedule stretched to them), in the current folder's models/ (run it in a scratch
folder holding a link to data/), and merges the per-epoch validation Acc@1 into the JSON file:

    python bench/bench_track_curves.py points nac 64 [--seed 0] [--out bench/results/track_curves.json]

Not a test: a 40-epoch point-cloud NAC takes about 2 minutes on one CPU thread.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from nac.checkpoint_io import RESUME_DIR
from nac.pipeline.params import compose
from nac.pipeline.schema_models import section
from nac.tracks.common import train_track_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("track", choices=["points", "listops", "text", "nlvr"])
    ap.add_argument("run")
    ap.add_argument("epochs", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "track_curves.json"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    params = compose(["profile=mini", f"{a.track}.train.epochs={a.epochs}"])
    start = time.time()
    res = train_track_run(  # as the stage
        section(params, a.track),
        a.run,
        a.seed,
        False,
        track=a.track,
        data=params["data"],
        prior=params["prior"],
        baselines=section(params, "image.baselines"),
        device=params.get("device", "auto"),
        resume=RESUME_DIR,
    )
    entry = {
        "val_acc1": [round(h["val_acc1"], 2) for h in res["history"]],
        "train_acc": [round(h["train_acc"], 2) for h in res["history"]],
        "val_n": res.get("val_n"),
        "wall_s": round(time.time() - start, 1),
        "threads": 1,
    }
    out = Path(a.out)
    results = json.loads(out.read_text()) if out.exists() else {"profile": "mini", "runs": {}}
    results["runs"].setdefault(a.track, {}).setdefault(a.run, {}).setdefault(str(a.epochs), {})[str(a.seed)] = entry
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(a.track, a.run, a.epochs, entry["val_acc1"], entry["wall_s"])


if __name__ == "__main__":
    main()
