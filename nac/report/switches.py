"""The authors' model, switch by switch (issue 25): every departure between the authors' NAC and
nac-repro's first model is a model or train key (``switches.yaml`` beside this file: the paper,
the authors' template, m2mKD, ours, the default), and the three that change the mechanism are
measured on the image track by ``bench/bench_switches.py``: each turned alone away from the default,
paired by seed with the pipeline's own default NAC."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from nac.fingerprint import source_fingerprint
from nac.stats import paired_ci

REGISTRY = Path(__file__).with_name("switches.yaml")
BENCH = Path("bench/results/switches.json")  # relative to the repository folder (printed so)
# the modules whose import closure trains and evaluates an image-track run (as a checkpoint's fingerprint)
CODE = ("nac.training.loop", "nac.data.registry", "nac.tracks.image")

# The measured switches: each run sets image.model keys (``set``) away from the default template, and
# ``value`` says what in the switch table. ``truncation``: the kernel of the authors' Tiny-ImageNet template
# (truncated at 0.9, a learnable bandwidth per module) with the regularizer on: the suite's earlier default,
# a combination no recorded configuration of the authors runs (issue 31: it empties the graph).
SWITCHES = {
    "truncation": {
        "set": {"truncation": 0.9, "learn_bandwidth": True, "kernel_per_module": True},
        "value": "0.9 with learnable per-module bandwidths (TINY-INET-NC-X's kernel) and the regularizer",
    },
    "signature_fit": {"set": {"signature_fit": "margin"}, "value": "margin"},
    "matching": {"set": {"matching": "search"}, "value": "search"},
}

# (label, how to read it from one run's eval + final mechanism numbers)
EFFECTS = {
    "IID Acc@1": lambda ev, mech, prior: ev["iid_acc1"],
    "OOD Acc@1": lambda ev, mech, prior: ev["ood_acc1"],
    "kernel gain (IID Acc@1 − dense)": lambda ev, mech, prior: ev["iid_acc1"] - ev["iid_acc1_dense"],
    "links with P = 0 (%)": lambda ev, mech, prior: 100.0 * mech["sparsity"],
    "mean P (%)": lambda ev, mech, prior: 100.0 * mech["mean_p"],
    "structure (own prior)": lambda ev, mech, prior: mech["structure"][prior],
    "distance to own prior": lambda ev, mech, prior: mech["distance"][prior],
    "nearest other − own distance": lambda ev, mech, prior: (
        min(v for k, v in mech["distance"].items() if k != prior) - mech["distance"][prior]
    ),
}


def bench_params(params: dict) -> dict[str, Any]:
    """What a bench run of the image track (``bench_switches``, ``bench_convergence``) depends on besides
    the key it varies: the image track's data, model and training settings, the prior (not the seeds:
    which seeds a file holds is checked where they are read), and the code that trains and evaluates
    (the hash of the sources a checkpoint's fingerprint covers, ``nac.fingerprint.source_fingerprint``).
    The report uses a bench file only while these are unchanged."""
    image, data = params.get("image") or {}, params.get("data") or {}
    return {
        "image": {
            k: image.get(k)
            for k in ("dataset", "val_split", "test_split", "ood_dataset", "ood_split", "model", "train")
        },
        "data": {str(d): data.get(d) for d in (image.get("dataset"), image.get("ood_dataset"))},
        "prior": params.get("prior"),
        "code": source_fingerprint(CODE)[:16],
    }


def registry() -> list[dict[str, Any]]:
    """The rows of ``switches.yaml``, each checked for its fields."""
    rows = yaml.safe_load(REGISTRY.read_text(encoding="utf-8"))
    need = ("key", "what", "paper", "authors", "m2mkd", "ours", "default")
    for row in rows:
        missing = [f for f in need if f not in row]
        if missing:
            raise ValueError(f"{REGISTRY}: switch {row.get('key')!r} lacks {missing}")
    return rows


def bench_status(bench: dict | None, params: dict) -> str | None:
    """None when ``bench`` holds every measured switch for every seed under these params; else why not."""
    if bench is None:
        return f"{BENCH} is missing (python bench/bench_switches.py)"
    if bench.get("params") != bench_params(params):
        return (
            f"{BENCH} was measured under other params or code than the committed ones "
            "(rerun python bench/bench_switches.py)"
        )
    for name in SWITCHES:
        have = set((bench.get("switches") or {}).get(name) or {})
        lacking = [s for s in params["seeds"] if str(s) not in have]
        if lacking:
            return f"{BENCH} lacks switch {name!r} for seeds {lacking} (python bench/bench_switches.py)"
    return None


def effects(bench: dict, defaults: dict[int, tuple[dict, dict]], prior: str, seeds: list[int]) -> pd.DataFrame:
    """Long table: per measured switch and effect, the default's and the switch's mean and the paired
    difference (switch − default) with its 95% CI over seeds. ``defaults[seed] = (eval, final mechanism)``
    of the pipeline's default NAC."""
    rows = []
    for name, spec in SWITCHES.items():
        runs = bench["switches"][name]
        for label, get in EFFECTS.items():
            base = [get(*defaults[s], prior) for s in seeds]
            other = [get(runs[str(s)]["eval"], runs[str(s)]["mechanism"]["final"], prior) for s in seeds]
            iv = paired_ci(other, base)
            rows.append(
                {
                    "switch": f"{name}={spec['value']}",
                    "effect": label,
                    "default": sum(base) / len(base),
                    "switched": sum(other) / len(other),
                    "difference": iv.estimate,
                    "lo": iv.lo,
                    "hi": iv.hi,
                    "n": iv.n,
                }
            )
    return pd.DataFrame(rows)


def _interval(r) -> str:
    if r.lo is None:
        return f"{r.difference:+.3g}"
    return f"{r.difference:+.3g} [{r.lo:+.3g}, {r.hi:+.3g}]"


def effects_display(long: pd.DataFrame) -> pd.DataFrame:
    """One row per switch, one column per effect: ``switch − default [95% CI]``, paired by seed."""
    wide = {}
    for r in long.itertuples():
        wide.setdefault(r.switch, {"switch (value)": r.switch})[r.effect] = _interval(r)
    return pd.DataFrame(list(wide.values()))


def switch_table(long: pd.DataFrame | None) -> pd.DataFrame:
    """Every switch: paper / authors / m2mKD / ours / default, and for the measured ones the effect on
    IID Acc@1 and on the links cut (switch − default, paired by seed)."""
    measured = {}
    if long is not None:
        for r in long.itertuples():
            if r.effect in ("IID Acc@1", "links with P = 0 (%)", "structure (own prior)"):
                measured.setdefault(r.switch.split("=")[0], []).append(f"{r.effect}: {_interval(r)}")
    rows = []
    for s in registry():
        key = s["key"]
        rows.append(
            {
                "switch": f"`{key}`",
                "what": s["what"],
                "paper": s["paper"],
                "authors": s["authors"],
                "m2mKD": s["m2mkd"],
                "ours (nac_v1)": s["ours"],
                "default": s["default"],
                "measured effect of ours (paired by seed)": "; ".join(measured.get(key.split(" / ")[0], [])) or "—",
            }
        )
    return pd.DataFrame(rows)
