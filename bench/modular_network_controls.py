"""The Modular Network question (issue 50, item 4): does the baseline fit at 40% because of the
method, our settings, or the capacity of libmodular's toy CIFAR network? Controls on ``shapes``,
seed 0, at the converged profile's length (96 epochs), each against the committed converged piece
``modular_network-0`` (train 40.6%, IID 39.3%):

- ``plain_cnn``: the same network with one module per layer (no routing: a plain 8-channel CNN of
  the same path), our settings: the capacity control;
- ``libmodular``: libmodular's ``cifar10.py`` settings where ours differ (read from louiskirsch/
  libmodular at 58c7ba1, docs/modular-network.md): a 2x2 max-pool after every layer, Adam at a
  constant 1e-3 (no weight decay, no warm-up or decay), batch 128, no label smoothing, no gradient
  clipping, no augmentation;
- ``libmodular_plain``: those settings with one module per layer.

**The reading, fixed before any control ran** (committed with this file):

- if ``libmodular`` ends >= 15 points of IID top-1 above ``modular_network-0``'s 39.3, our settings
  are what holds the baseline back: the next mini rerun takes libmodular's (the written rule: the
  authors' template decides where the paper is silent);
- if ``plain_cnn`` ends within 5 points of 39.3, the 8-channel path's capacity bounds the baseline,
  not the routing: 40% is this toy network's result, to be said so in the report;
- otherwise neither explanation is shown, and the record says so.

**A fourth control, planned after the three above had run** (plain_cnn 60.4, libmodular 20.7,
libmodular_plain 58.8 IID; committed with this paragraph before it ran): ``long``, our settings at
twice the converged length (192 epochs, the cosine stretched over them), because the committed
pieces' training accuracy still rose at epoch 96. Its reading, fixed before it ran: IID >= 44.3
(5 points above 39.3: beyond the seeds' 37.7-41.0 and 3 binomial SEs of 1,000 test images) means
the converged length under-trains this baseline, and the report says so; below 44.3, 40% is the
baseline's result at any length the converged profile could afford.

    python bench/modular_network_controls.py --control plain_cnn [--epochs 96]

Not a test: ``plain_cnn`` is about 5 minutes on one CPU thread, the libmodular ones 5-10, ``long`` about 30.
"""

from __future__ import annotations

import argparse
import copy
import fcntl
import json
import tempfile
import time
from pathlib import Path

import torch

from nac.bench.scratch import train_in_scratch
from nac.pipeline.datasets import builder

ROOT = Path(__file__).resolve().parent.parent
LIBMODULAR_TRAIN = {
    "batch_size": 128,
    "lr": 1e-3,
    "min_lr": 1e-3,  # the cosine from 1e-3 to 1e-3: constant
    "warmup_epochs": 0,
    "weight_decay": 0.0,
    "label_smoothing": 0.0,
    "grad_clip": None,
    "augment": False,
}
CONTROLS = {
    "plain_cnn": ({"modules_per_layer": 1}, {}),
    "libmodular": ({"pool_after": [0, 1, 2, 3]}, LIBMODULAR_TRAIN),
    "libmodular_plain": ({"pool_after": [0, 1, 2, 3], "modules_per_layer": 1}, LIBMODULAR_TRAIN),
    "long": ({}, {}),
}
EPOCHS = {"long": 192}  # a control's own length (the others: --epochs, default the converged 96)
# the first benchmark's converged piece modular_network-0 and the params it ran under (its record)
RECORD = ROOT / "results/converged/records/benchmark1"
COMMITTED = {"train_acc": 40.6, "iid_acc1": 39.3}  # RECORD / pieces/converged/image/modular_network-0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--control", required=True, choices=list(CONTROLS))
    ap.add_argument("--epochs", type=int, default=None, help="default: 96, or the control's own (EPOCHS)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/modular_network_controls.json")
    args = ap.parse_args()
    args.epochs = args.epochs or EPOCHS.get(args.control, 96)
    torch.set_num_threads(1)
    model, train = CONTROLS[args.control]
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with tempfile.TemporaryDirectory(prefix=f"mn-{args.control}-") as work:
        # the record's params (shapes, the converged profile as it was), not today's benchmark's
        params = copy.deepcopy(json.loads((RECORD / "record.json").read_text())["params"])
        params["seeds"], params["data"]["root"] = [0], f"{work}/data"
        params["image"]["baselines"]["modular_network"].update(model)
        params["image"]["train"].update(train, epochs=args.epochs)
        for name in (params["image"]["dataset"], params["image"]["ood_dataset"]):
            b = builder(params["data"], name)
            b.download()
            b.prepare()
        res, ev, wall = train_in_scratch(params, "modular_network", 0)
    record = {
        "started": started,
        "model": model,
        "train": train,
        "epochs": args.epochs,
        "train_wall_s": round(wall, 1),
        "train_acc": res["train_acc"],
        "history": [{k: e[k] for k in ("epoch", "train_acc", "val_acc1", "lr")} for e in res["history"]],
        **{k: ev[k] for k in ("iid_acc1", "iid_acc5", "ood_acc1", "ood_acc5")},
        "parameters": res.get("parameters"),
        "committed_modular_network_0": COMMITTED,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(args.out.read_text()) if args.out.is_file() else {"plan": __doc__, "controls": {}}
        data["controls"][args.control] = record
        args.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: record[k] for k in ("train_acc", "iid_acc1", "ood_acc1", "train_wall_s")}))


if __name__ == "__main__":
    main()
