"""The run gate (issue 50): which trained runs did not train, judged from their own training records
against their peers and against the learning-rate schedule, by the rule written in
``docs/run-gate.md`` before any result of the paper-regime benchmark existed.

A run is one model at one seed of one track: ``image/train/<run>-<seed>.json`` or
``tracks/<track>/<run>-<seed>.json``, each with a ``history`` of per-epoch ``train_acc`` (percent)
and ``lr``. Its *peers* are the same model's runs at the profile's other seeds. With ``f`` the run's
final train accuracy, ``M`` the median of its peers' finals and ``margin = max(MIN_MARGIN, MADS x
1.4826 x MAD(peers' finals))`` (the MAD scaled to a normal SD, floored at 2 points):

- **behind its peers**: ``f < M - margin``;
- **did not reach its peers' level before the anneal**: the first epoch whose train accuracy
  reaches ``M - margin`` comes after the learning rate has fallen below ``ANNEALED`` (10%) of its
  peak, or never comes.

A run with fewer than ``MIN_PEERS`` peers is not judged (said so). The primary analysis keeps every
run: a flagged run is shown with its reasons and numbers, and each claim that reads it is judged
again without that seed beside its verdict (``registry.evaluate_claims``: the sensitivity)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

MIN_MARGIN = 2.0  # points of train accuracy: below this a lag is within what seeds do
MADS = 3.0  # how many (normal-scaled) median absolute deviations of the peers a lag must pass
ANNEALED = 0.10  # the learning rate's fraction of its peak below which the schedule has annealed
MIN_PEERS = 2
RECORD = re.compile(r"^(?P<group>image|tracks/[^/]+)/(?:train/)?(?P<run>.+)-(?P<seed>\d+)\.json$")


@dataclass(frozen=True)
class Flag:
    """One run the gate flags, with the numbers it was judged on."""

    group: str  # "image" or "tracks/<track>"
    run: str
    seed: int
    reasons: tuple[str, ...]
    final: float  # its final train accuracy
    peers_median: float
    margin: float
    level: float  # M - margin
    reached_epoch: int | None  # the first epoch at that level (None: never)
    annealed_epoch: int | None  # the first epoch with lr below ANNEALED x peak (None: never)
    epochs: int

    @property
    def key(self) -> tuple[str, str, int]:
        return self.group, self.run, self.seed

    def text(self) -> str:
        reached = "never" if self.reached_epoch is None else f"epoch {self.reached_epoch}"
        annealed = "never" if self.annealed_epoch is None else f"epoch {self.annealed_epoch}"
        return (
            f"{self.group} {self.run} seed {self.seed}: {' and '.join(self.reasons)} (final train accuracy "
            f"{self.final:.1f}% against its peers' median {self.peers_median:.1f}%, margin {self.margin:.1f}; "
            f"reached {self.level:.1f}% {reached}, the LR below {ANNEALED:.0%} of its peak from {annealed}, "
            f"of {self.epochs} epochs)"
        )


def _history(rec: dict, where: str) -> tuple[list[float], list[float]]:
    hist = rec.get("history") if isinstance(rec, dict) else None
    if not isinstance(hist, list) or not hist:
        raise ValueError(f"malformed training record {where}: no history")
    try:
        acc = [float(e["train_acc"]) for e in hist]
        lr = [float(e["lr"]) for e in hist]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"malformed training record {where}: an epoch without a numeric train_acc/lr ({e})") from None
    return acc, lr


def judge(records: dict[tuple[str, str, int], tuple[list[float], list[float]]]) -> tuple[list[Flag], list[str]]:
    """``(flags, unjudged)`` for the training records ``{(group, run, seed): (train_acc, lr)}``:
    the flagged runs (in key order) and one line per group of runs too few to have peers."""
    by_model: dict[tuple[str, str], dict[int, tuple[list[float], list[float]]]] = {}
    for (group, run, seed), rec in records.items():
        by_model.setdefault((group, run), {})[seed] = rec
    flags, unjudged = [], []
    for (group, run), seeds in sorted(by_model.items()):
        if len(seeds) - 1 < MIN_PEERS:
            unjudged.append(f"{group} {run}: {len(seeds)} seed(s), fewer than {MIN_PEERS} peers each: not judged")
            continue
        for seed, (acc, lr) in sorted(seeds.items()):
            finals = np.array([a[-1] for s, (a, _) in seeds.items() if s != seed])
            med = float(np.median(finals))
            margin = max(MIN_MARGIN, MADS * 1.4826 * float(np.median(np.abs(finals - med))))
            level, final = med - margin, acc[-1]
            reached = next((i + 1 for i, a in enumerate(acc) if a >= level), None)
            peak = max(lr)
            annealed = next((i + 1 for i, x in enumerate(lr) if peak > 0 and x < ANNEALED * peak), None)
            reasons = []
            if final < level:
                reasons.append("behind its peers")
            if reached is None or (annealed is not None and reached > annealed):
                reasons.append("did not reach its peers' level before the anneal")
            if reasons:
                flags.append(
                    Flag(group, run, seed, tuple(reasons), final, med, margin, level, reached, annealed, len(acc))
                )
    return flags, unjudged


def training_records(root: Path | str, params: dict) -> dict[tuple[str, str, int], tuple[list[float], list[float]]]:
    """Every training record of the profile's configured runs and seeds under the metrics tree
    ``root`` that exists (an absent one is the claims' business: they say "not measured")."""
    root, seeds = Path(root), [int(s) for s in params["seeds"]]
    wanted = [("image", "image/train/{run}-{seed}.json", params.get("image", {}).get("ladder", []))]
    for track, section in params.items():
        if isinstance(section, dict) and isinstance(section.get("runs"), list) and (root / "tracks" / track).is_dir():
            wanted.append((f"tracks/{track}", f"tracks/{track}/{{run}}-{{seed}}.json", section["runs"]))
    out = {}
    for group, pattern, runs in wanted:
        for run in runs:
            for seed in seeds:
                rel = pattern.format(run=run, seed=seed)
                path = root / rel
                if not path.is_file():
                    continue
                try:
                    rec = json.loads(path.read_text(encoding="utf-8"))
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    raise ValueError(f"malformed training record {path}: {e}") from e
                if isinstance(rec, dict) and "history" in rec:
                    out[(group, run, seed)] = _history(rec, str(path))
    return out


def key_of(rel: str) -> tuple[str, str, int] | None:
    """The run a metrics file belongs to (``image/eval/nac-0.json`` -> ``("image", "nac", 0)``), or None."""
    m = RECORD.match(rel.replace("image/eval/", "image/"))
    return None if m is None else (m["group"], m["run"], int(m["seed"]))


def as_dict(flag: Flag) -> dict:
    d = asdict(flag)
    d["reasons"] = list(flag.reasons)
    d["text"] = flag.text()
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}
