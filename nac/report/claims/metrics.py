"""Reading the metrics a claim needs. Only the runs, seeds and targets named in ``params`` are read.
A missing file (or the missing part of one) raises ``Missing`` (the claim is "not measured"); a
malformed one (bad JSON, a missing key, a non-numeric value) raises ``ValueError``."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nac.report.claims.gate import key_of
from nac.report.switches import bench_params

PIO, NAC = "perceiver_io", "nac"
# bench/bench_convergence.py's results, beside the metrics tree (``<metrics>/../bench/results/``)
CONVERGENCE = Path("bench/results/convergence.json")
NLVR_CONTROLS = ("text_only", "image_only")  # the NLVR single-modality controls
# profiles whose own image runs are trained to the plateau (docs/convergence.md): no bench runs needed
AT_PLATEAU = ("converged", "converged_smoke")


class Missing(Exception):
    """A metrics file (or the part of one a claim needs) does not exist: 'not measured'."""


def number(obj: dict, key: str, where: str) -> float:
    """``obj[key]`` as a finite float, else ``ValueError`` naming ``where``."""
    if not isinstance(obj, dict) or key not in obj:
        raise ValueError(f"malformed metrics {where}: no key {key!r}")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"malformed metrics {where}: {key}={v!r} is not a finite number")
    return float(v)


class Metrics:
    """The ``metrics/`` tree of one profile: cached JSON files and per-seed readers."""

    def __init__(self, root: Path, params: dict):
        self.root, self.params, self.seeds = Path(root), params, [int(s) for s in params["seeds"]]
        # the profile's seeds; ``seeds`` is narrowed for the run gate's sensitivity (registry.evaluate_claims)
        self.all_seeds = list(self.seeds)
        self._cache: dict[str, Any] = {}
        # the runs (``(group, run, seed)``, ``gate.key_of``) whose records a claim read: the run gate
        # judges a claim again without a flagged run it read
        self.touched: set[tuple[str, str, int]] = set()

    def touch(self, group: str, run: str, seed: int) -> None:
        self.touched.add((group, run, int(seed)))

    def label(self, rel: str) -> str:
        return f"{self.root.name}/{rel}"

    def json(self, rel: str) -> Any:
        key = key_of(rel)
        if key is not None:
            self.touch(*key)
        if rel not in self._cache:
            path = self.root / rel
            if not path.is_file():
                raise Missing(self.label(rel))
            try:
                self._cache[rel] = json.loads(path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:  # bad JSON, or bytes that are not UTF-8
                raise ValueError(f"malformed metrics file {path}: {e}") from e
        return self._cache[rel]

    def per_seed(self, folder: str, runs: Sequence[str], key: str, configured: Sequence[str]) -> dict[str, list[float]]:
        """``{run: [value of key per seed]}`` from ``<folder>/<run>-<seed>.json``; every missing
        file (or unconfigured run) is named in one ``Missing``."""
        out, missing = {}, []
        for run in runs:
            if run not in configured:
                missing.append(f"run {run} (not configured for {folder})")
                continue
            absent = [s for s in self.seeds if not (self.root / f"{folder}/{run}-{s}.json").is_file()]
            if absent:
                missing.append(self.label(f"{folder}/{run}-<seed>.json") + f" (seeds {', '.join(map(str, absent))})")
                continue
            out[run] = [
                number(self.json(f"{folder}/{run}-{s}.json"), key, self.label(f"{folder}/{run}-{s}.json"))
                for s in self.seeds
            ]
        if missing:
            raise Missing("; ".join(missing))
        return out

    def image(self, runs: Sequence[str], key: str) -> dict[str, list[float]]:
        return self.per_seed("image/eval", runs, key, self.params["image"]["ladder"])

    def track(self, track: str, runs: Sequence[str], key: str) -> dict[str, list[float]]:
        if track not in self.params:
            raise Missing(f"params has no {track!r} section")
        return self.per_seed(f"tracks/{track}", runs, key, self.params[track]["runs"])

    def prune_curve(self, run: str, seed: int, order: str = "connectivity") -> list[dict]:
        """The prune rows of one (run, seed, order), sorted by dropped fraction, starting at 0."""
        if run not in self.params.get("prune", {}).get("runs", []):
            raise Missing(f"run {run} (not in prune.runs)")
        rows = self.json("image/prune.json")
        if not isinstance(rows, list):
            raise ValueError(f"malformed metrics {self.label('image/prune.json')}: expected a list of rows")
        where = self.label("image/prune.json")
        for r in rows:
            for key in ("run", "seed"):
                if not isinstance(r, dict) or key not in r:
                    raise ValueError(f"malformed metrics {where}: a row without {key!r}")
        curve = sorted(
            (r for r in rows if r["run"] == run and r["seed"] == seed and r.get("order", "connectivity") == order),
            key=lambda r: number(r, "dropped_fraction", where),
        )
        for r in curve:
            number(r, "acc1", where)
        self.touch("image", run, seed)
        if not curve or curve[0]["dropped_fraction"] != 0.0:
            raise Missing(f"{where}: no dropped_fraction 0 row for {run} seed {seed} ({order} order)")
        return curve

    def mechanism(self, run: str, phase: str) -> list[dict]:
        """The ``mechanism`` block (``nac.mechanism``) of a run's training metrics, per seed."""
        out = []
        for s in self.seeds:
            rel = f"image/train/{run}-{s}.json"
            t = self.json(rel)
            if not isinstance(t, dict) or "mechanism" not in t or phase not in t["mechanism"]:
                raise Missing(f"mechanism numbers ({phase}) in {self.label(rel)}")
            out.append(t["mechanism"][phase])
        return out

    def longer(self, runs: Sequence[str], *keys: str) -> tuple[int, dict[str, dict[str, list[float]]]]:
        """``(epochs, {key: {run: [key per seed]}})`` from the evaluations of ``bench/bench_convergence.py``'s
        longer image-track runs (``CONVERGENCE`` beside the metrics tree): the longest length at which
        every run has every key for every seed of ``params["seeds"]``, so that values read together
        (e.g. accuracy with and without the kernel) come from the same runs. A profile trained to
        its plateau (``AT_PLATEAU``) has no ``_long`` claims (issue 46): no run is longer than its own."""
        try:
            conv = self.json(f"../{CONVERGENCE}")
        except Missing:
            raise Missing(
                f"{CONVERGENCE} (python bench/bench_convergence.py --seeds {' '.join(map(str, self.seeds))})"
            ) from None
        if not isinstance(conv, dict):
            raise ValueError(f"malformed {self.root.parent / CONVERGENCE}: expected an object")
        if conv.get("profile") != self.params.get("profile"):
            raise Missing(
                f"{CONVERGENCE} holds profile {conv.get('profile')!r}'s runs, not {self.params.get('profile')!r}'s "
                "(run python bench/bench_convergence.py under this profile)"
            )
        if conv.get("params") != bench_params(self.params):
            raise Missing(
                f"{CONVERGENCE} was trained under other model or training settings, or other code, than "
                "the committed ones (rerun python bench/bench_convergence.py)"
            )
        by_run = conv.get("runs", {})
        lengths = set.intersection(*[set((by_run.get(r) or {}).keys()) for r in runs]) if runs else set()

        def evals(run: str, epochs: str) -> list[dict]:
            per = by_run[run][epochs]
            return [((per.get(str(s)) or {}).get("eval") or {}) if isinstance(per, dict) else {} for s in self.seeds]

        for epochs in sorted(lengths, key=int, reverse=True):
            if all(key in e for r in runs for e in evals(r, epochs) for key in keys):
                return int(epochs), {
                    key: {
                        r: [
                            number(e, key, f"{CONVERGENCE} {r} {epochs} epochs seed {s}")
                            for s, e in zip(self.seeds, evals(r, epochs))
                        ]
                        for r in runs
                    }
                    for key in keys
                }
        raise Missing(f"{CONVERGENCE}: no length with {', '.join(keys)} for seeds {self.seeds} of {', '.join(runs)}")

    def image_eval(self, run: str, key: str) -> list[Any]:
        """``key`` of a ladder run's evaluation metrics per seed, any type (a baseline's analysis block)."""
        if run not in self.params["image"]["ladder"]:
            raise Missing(f"run {run} (not in image.ladder)")
        out = []
        for s in self.seeds:
            rel = f"image/eval/{run}-{s}.json"
            e = self.json(rel)
            if not isinstance(e, dict) or key not in e:
                raise Missing(f"{key} in {self.label(rel)}")
            out.append(e[key])
        return out
