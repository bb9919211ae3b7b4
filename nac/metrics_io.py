"""Reading the metrics files the stages wrote, for every stage that aggregates them (the report,
and the prune, few-shot and NLVR-analysis stages checking what they are about to publish); the
``staged`` writer that publishes their outputs all at once is ``nac.pipeline.io.staged``.

Exactly the files ``params.yaml`` implies are read (``<run>-<seed>.json`` of every configured run
and seed, by ``nac.pipeline.paths``'s names): a missing one, an extra ``*.json`` beside them (a
backup copy would otherwise count as one more seed), a file whose ``run``/``seed`` fields disagree
with its name, bytes that are not UTF-8, bad JSON, a missing key, or a value that is not a real
finite number where one is expected each raise ``MetricsError`` naming the file, the key and what
was expected, before anything is written.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nac.pipeline.paths import run_file

IMAGE_EVAL_KEYS = ("iid_acc1", "iid_acc5", "ood_acc1", "ood_acc5")
TRACK_KEYS = ("val_acc1", "val_chance", "test_acc1", "test_chance")
PRUNE_KEYS = ("dropped_fraction", "acc1")
ANALYSIS_KEYS = ("n", "knn_k", "folds", "pca_dim", "chance", "p_spread", "p_mean", "pca_explained")
ANALYSIS_KNN_KEYS = (
    "knn_accuracy",
    "knn_accuracy_ci95",
    "knn_shuffled",
    "knn_shuffled_ci95",
    "silhouette",
    "silhouette_shuffled",
)
EMBEDDING_COLUMNS = ("x", "y", "reasoning_type", "sentence")
FEWSHOT_ROW_KEYS = ("acc1",)
STAGES = (
    ("image/eval", "train"),
    ("image/train", "train"),
    ("image/prune", "prune"),
    ("nlvr/", "nlvr_analysis"),
    ("fewshot/", "fewshot"),
    *((f"tracks/{t}/", f"train_{t}") for t in ("points", "listops", "text", "nlvr")),
)


def fix(path: str | Path) -> str:
    """How to get a good copy of a metrics file back: rerun the stage that writes it, or restore it."""
    stage = next((st for part, st in STAGES if part in Path(path).as_posix()), "<stage>")
    return f"rerun the stage that writes it (dvc repro {stage}) or restore it (git checkout -- {path})"


class MetricsError(ValueError):
    """A metrics file is absent, extra, unreadable or malformed; the message names it and the fix."""


class MissingMetrics(MetricsError, FileNotFoundError):
    """A metrics file the configuration implies does not exist."""


def _is_number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def _describe(v: Any) -> str:
    return "null" if v is None else f"{type(v).__name__} {v!r}"


def _non_finite(obj: Any, where: str = "") -> str | None:
    """The key path of the first NaN or infinite number anywhere in ``obj``, else None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return where or "(top level)"
    if isinstance(obj, dict):
        items = [(f"{where}.{k}" if where else str(k), v) for k, v in obj.items()]
    else:
        items = [(f"{where}[{i}]", v) for i, v in enumerate(obj)] if isinstance(obj, list) else []
    for at, v in items:
        bad = _non_finite(v, at)
        if bad:
            return bad
    return None


def read_text(path: str | Path) -> str:
    """The file as UTF-8 text; ``MetricsError`` naming the file and the first bad byte otherwise."""
    path = Path(path)
    if not path.is_file():
        raise MissingMetrics(f"missing metrics file {path}; {fix(path)}")
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MetricsError(
            f"{path} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); {fix(path)}"
        ) from None


def load_json(path: str | Path) -> Any:
    """Parse a metrics file: UTF-8, valid JSON, no NaN or infinite number anywhere."""
    path = Path(path)
    try:
        obj = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise MetricsError(f"{path} is not valid JSON ({e}); {fix(path)}") from None
    bad = _non_finite(obj)
    if bad:
        raise MetricsError(f"{path}: {bad} is not a finite number (NaN or infinite); {fix(path)}")
    return obj


def need(obj: Any, key: str, path: str | Path, kind: str = "number", where: str = "") -> Any:
    """``obj[key]`` checked to be of ``kind`` (number: a real finite int/float, not bool/str/null;
    int, str, dict, list); ``MetricsError`` naming the file, the key and what was expected."""
    at = f"{path}{' ' + where if where else ''}"
    if not isinstance(obj, dict):
        raise MetricsError(f"{at}: expected a JSON object with key {key!r}, found {type(obj).__name__}; {fix(path)}")
    if key not in obj:
        raise MetricsError(f"{at}: missing key {key!r}; {fix(path)}")
    v = obj[key]
    ok = {
        "number": _is_number(v),
        "int": isinstance(v, int) and not isinstance(v, bool),
        "str": isinstance(v, str),
        "dict": isinstance(v, dict),
        "list": isinstance(v, list),
    }[kind]
    if not ok:
        expected = "a finite number" if kind == "number" else f"a {kind}"
        raise MetricsError(f"{at}: {key} = {_describe(v)}, expected {expected}; {fix(path)}")
    return v


def numbers(obj: dict, keys: Iterable[str], path: str | Path, where: str = "") -> None:
    for key in keys:
        need(obj, key, path, "number", where)


def unique(names: Sequence, what: str) -> None:
    dup = sorted({str(n) for n in names if list(names).count(n) > 1})
    if dup:
        raise MetricsError(f"duplicate {what}: {', '.join(dup)}; list each once in params.yaml")


def exact_files(folder: Path, runs: Sequence[str], seeds: Sequence[int], stage: str) -> list[tuple[str, int, Path]]:
    """``(run, seed, path)`` of ``<folder>/<run>-<seed>.json`` for every configured run and seed;
    refuses a missing one and any other ``*.json`` in ``folder`` (it would be read as a run)."""
    unique(runs, f"runs for {folder}")
    unique([int(s) for s in seeds], "seeds")
    want = [(run, int(seed), folder / run_file(run, seed)) for run in runs for seed in seeds]
    missing = [str(p) for _, _, p in want if not p.is_file()]
    if missing:
        raise MissingMetrics(
            f"missing metrics: {', '.join(missing)}; did {stage} run for every run and seed of params.yaml?"
        )
    expected = {p.name for _, _, p in want}
    extra = sorted(p.name for p in folder.glob("*.json") if p.name not in expected)
    if extra:
        raise MetricsError(
            f"{folder} holds files that no configured run and seed names: {', '.join(extra)}; "
            f"delete them or move them out of {folder} (a copy there would count as another seed)"
        )
    return want


def _named(obj: Any, run: str, seed: int, path: Path) -> dict:
    """Check a per-run file's own ``run`` and ``seed`` fields against its name."""
    if need(obj, "run", path, "str") != run or need(obj, "seed", path, "int") != seed:
        raise MetricsError(
            f"{path} says run {obj['run']!r} seed {obj['seed']!r}, but its name says run {run!r} "
            f"seed {seed}; it was copied or renamed: {fix(path)}"
        )
    return obj


def _history(obj: dict, path: Path) -> None:
    for i, h in enumerate(need(obj, "history", path, "list")):
        need(h, "epoch", path, "int", f"history[{i}]")
        need(h, "val_acc1", path, "number", f"history[{i}]")


def _number_map(obj: dict, key: str, path: Path) -> None:
    if key in obj:
        for k in need(obj, key, path, "dict"):
            need(obj[key], k, path, "number", f"{key}:")


def image_runs(metrics: str | Path, kind: str, runs: Sequence[str], seeds: Sequence[int]) -> list[dict]:
    """Validated ``metrics/image/<kind>/<run>-<seed>.json`` (kind ``eval`` or ``train``) of every
    configured run and seed, in ladder order then seed order."""
    folder = Path(metrics) / "image" / kind
    out = []
    for run, seed, path in exact_files(folder, runs, seeds, "the train stage (python stages/train.py)"):
        obj = _named(load_json(path), run, seed, path)
        if kind == "eval":
            numbers(obj, IMAGE_EVAL_KEYS, path)
            if "iid_acc1_dense" in obj:
                need(obj, "iid_acc1_dense", path)
            _number_map(obj, "ood_acc1_by_style", path)
        else:
            _history(obj, path)
            if "parameters" in obj:
                need(obj, "parameters", path, "int")
            if "mechanism" in obj:
                for phase in ("init", "final"):
                    block = need(need(obj, "mechanism", path, "dict"), phase, path, "dict", "mechanism:")
                    numbers(block, ("sparsity", "mean_p", "bandwidth"), path, f"mechanism.{phase}:")
                    _number_map(block, "distance", path)
        out.append(obj)
    return out


def track_runs(metrics: str | Path, track: str, runs: Sequence[str], seeds: Sequence[int]) -> list[dict]:
    """Validated ``metrics/tracks/<track>/<run>-<seed>.json`` of every configured run and seed."""
    folder = Path(metrics) / "tracks" / track
    out = []
    for run, seed, path in exact_files(folder, runs, seeds, f"train_{track} (python stages/train_track.py {track})"):
        obj = _named(load_json(path), run, seed, path)
        numbers(obj, TRACK_KEYS, path)
        _history(obj, path)
        if track == "nlvr":
            need(obj, "val_acc1_by_type", path, "dict")
            _number_map(obj, "val_acc1_by_type", path)
        out.append(obj)
    return out


def prune_rows(path: str | Path, runs: Sequence[str], seeds: Sequence[int]) -> list[dict]:
    """Validated rows of ``prune.json``: one per (run, seed, order, fraction), of configured runs
    and seeds only, every one present."""
    path = Path(path)
    rows = load_json(path)
    if not isinstance(rows, list):
        raise MetricsError(f"{path}: expected a JSON list of rows, found {type(rows).__name__}; {fix(path)}")
    seen = set()
    for i, r in enumerate(rows):
        where = f"row {i}"
        run, seed = need(r, "run", path, "str", where), need(r, "seed", path, "int", where)
        numbers(r, PRUNE_KEYS, path, where)
        key = (run, seed, r.get("order", "connectivity"), r["dropped_fraction"])
        if key in seen:
            raise MetricsError(
                f"{path}: {where} repeats run {run!r} seed {seed} order {key[2]!r} fraction {key[3]}; {fix(path)}"
            )
        seen.add(key)
        if run not in runs or seed not in seeds:
            raise MetricsError(
                f"{path}: {where} is of run {run!r} seed {seed}, which params.yaml does not configure "
                f"(prune.runs, seeds); {fix(path)}"
            )
        if "images_per_s" in r and not all(_is_number(v) for v in need(r, "images_per_s", path, "list", where)):
            raise MetricsError(f"{path} {where}: images_per_s must be a list of finite numbers; {fix(path)}")
    absent = [f"{run}-{seed}" for run in runs for seed in seeds if not any(k[:2] == (run, seed) for k in seen)]
    if absent:
        raise MetricsError(f"{path}: no rows for {', '.join(absent)}; {fix(path)}")
    return rows


def nlvr_analysis(path: str | Path) -> dict:
    path = Path(path)
    a = load_json(path)
    need(a, "run", path, "str")
    need(a, "seed", path, "int")
    need(a, "split", path, "str")
    numbers(a, ANALYSIS_KEYS, path)
    if "knn_accuracy" in a:
        numbers(a, ANALYSIS_KNN_KEYS, path)
    return a


def nlvr_examples(path: str | Path) -> dict:
    path = Path(path)
    e = load_json(path)
    numbers(e, ("threshold", "bandwidth"), path)
    for i, ex in enumerate(need(e, "examples", path, "list")):
        need(ex, "reasoning_type", path, "str", f"examples[{i}]")
        need(ex, "sentence", path, "str", f"examples[{i}]")
        P = need(ex, "P", path, "list", f"examples[{i}]")
        if not P or not all(isinstance(row, list) and len(row) == len(P) and all(map(_is_number, row)) for row in P):
            raise MetricsError(f"{path} examples[{i}]: P must be a square matrix of finite numbers; {fix(path)}")
    return e


def nlvr_embedding(path: str | Path) -> pd.DataFrame:
    """``embedding.csv``: UTF-8, the columns x, y (finite numbers), reasoning_type, sentence."""
    path = Path(path)
    try:
        df = pd.read_csv(io.StringIO(read_text(path)))
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise MetricsError(f"{path} is not a valid CSV file ({e}); {fix(path)}") from None
    missing = [c for c in EMBEDDING_COLUMNS if c not in df.columns]
    if missing:
        raise MetricsError(
            f"{path}: missing column(s) {', '.join(missing)} (has {', '.join(map(str, df.columns))}); {fix(path)}"
        )
    if df.empty:
        raise MetricsError(f"{path}: no rows; {fix(path)}")
    for c in ("x", "y"):
        v = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float)
        bad = np.flatnonzero(~np.isfinite(v))
        if len(bad):
            raise MetricsError(
                f"{path}: column {c} row {int(bad[0]) + 1} (line {int(bad[0]) + 2}) = "
                f"{str(df[c].iloc[bad[0]])!r}, expected a finite number ({len(bad)} such row(s)); {fix(path)}"
            )
        df[c] = v
    return df


def fewshot_target(path: str | Path, target: str) -> dict:
    """``metrics/fewshot/<target>.json``: its target, source, protocol and one row per (run,
    shots, episode) with a finite ``acc1``."""
    path = Path(path)
    fs = load_json(path)
    if need(fs, "target", path, "str") != target:
        raise MetricsError(f"{path} says target {fs['target']!r}, but its name says {target!r}; {fix(path)}")
    need(fs, "source", path, "str")
    need(fs, "protocol", path, "dict")
    seen = set()
    for i, r in enumerate(need(fs, "rows", path, "list")):
        where = f"rows[{i}]"
        key = (
            need(r, "run", path, "str", where),
            need(r, "shots", path, "int", where),
            need(r, "episode", path, "int", where),
        )
        numbers(r, FEWSHOT_ROW_KEYS, path, where)
        if key in seen:
            raise MetricsError(f"{path}: {where} repeats run {key[0]!r} shots {key[1]} episode {key[2]}; {fix(path)}")
        seen.add(key)
    return fs


def fewshot_targets(metrics: str | Path, targets: Sequence[str]) -> dict[str, dict]:
    folder = Path(metrics) / "fewshot"
    unique(list(targets), "few-shot targets")
    extra = sorted(p.name for p in folder.glob("*.json") if p.stem not in targets)
    if extra:
        raise MetricsError(
            f"{folder} holds files that no configured target names: {', '.join(extra)}; delete them "
            f"or move them out of {folder}"
        )
    return {t: fewshot_target(folder / f"{t}.json", t) for t in targets}


@contextmanager
def published_as(stage: str | Path, final: str | Path) -> Iterator[None]:
    """Check a stage's staged outputs under their published names: a ``MetricsError`` raised in the
    block names ``final`` where it said ``stage`` (the staging folder is gone by then)."""
    try:
        yield
    except MetricsError as e:
        raise type(e)(str(e).replace(str(stage), str(final))) from None
