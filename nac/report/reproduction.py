"""``reports/reproduction.md``: this run against the committed one.

The committed run is the one whose ``metrics/`` and ``reports/`` the checkout's ``HEAD`` holds
(read with ``git show HEAD:<path>``, so a run that has just overwritten them is still compared
with what was committed). Per claim: the committed estimate and 95% CI, this run's estimate, the
difference, whether this run's estimate lies inside the committed CI, and whether the verdict
changed. Per image run and seed: the IID and OOD Acc@1 difference. Then every number of every
metrics file (mechanism numbers, the NLVR analysis, the claims' own; timings apart): which differ,
by how much (``compare_all``). The page names the
environment differences (``nac.environment``, against ``requirements.lock``) that explain a
difference within the noise; a run with other params than the committed one is not compared.
"""

from __future__ import annotations

import io
import json
import math
import re
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from nac.environment import differences, installed, read_lock
from nac.pipeline.stage_params import keys

PAGE = "reproduction.md"
CLAIMS_CSV = "reports/tables/claims.csv"
EVAL = "metrics/image/eval"


def committed(rel: str, root: str | Path = ".") -> str | None:
    """The text of ``rel`` at ``HEAD`` (None: no git, no commit, or no such file there)."""
    try:
        r = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=root, capture_output=True, text=True, encoding="utf-8")
    except OSError:
        return None
    return r.stdout if r.returncode == 0 else None


def committed_params(root: str | Path = ".") -> dict[str, Any] | None:
    """The params the committed report ran with: ``dvc.lock`` at HEAD, the report stage's
    ``params.yaml`` entry (dotted key -> value), or None."""
    text = committed("dvc.lock", root)
    try:  # as DVC writes it, YAML 1.2 (PyYAML's YAML 1.1 reads its ``1e-05`` as a string)
        lock = OmegaConf.to_container(OmegaConf.create(text), resolve=False)
        return dict(lock["stages"]["report"]["params"]["params.yaml"])
    except (TypeError, KeyError, AttributeError, ValueError, yaml.YAMLError, OmegaConfBaseException):
        return None


def params_differ(params: dict, then: dict[str, Any]) -> list[str]:
    """The report's params (``nac.pipeline.stage_params``) whose value differs from the committed
    run's ``then``; a key the committed lock does not hold (read only since) is not compared."""
    out = []
    for key in keys("report", params) or []:
        if key not in then:
            continue
        node: Any = params
        for part in key.split("."):
            node = node[part]
        if _differs(_plain(node), _plain(then[key])):
            out.append(key)
    return out


def _differs(now: Any, then: Any) -> bool:
    """Whether a param differs from the committed run's; inside a section, a key the committed run does
    not hold (a setting read only since, at its default then) is not compared, as a whole key is not."""
    if isinstance(now, dict) and isinstance(then, dict):
        return any(k not in now or _differs(now[k], then[k]) for k in then)
    return now != then


def _plain(d: Any) -> Any:
    return json.loads(json.dumps(d))


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def compare_claims(rows: list[dict], committed_csv: str) -> list[dict]:
    """One row per claim of either run: estimates, difference, inside the committed CI, verdicts."""
    old = {r["id"]: r for r in pd.read_csv(io.StringIO(committed_csv)).to_dict("records")}
    out = []
    for r in rows:
        c = old.get(r["id"])
        now, then = _num(r.get("estimate")), _num(c.get("estimate")) if c else None
        lo, hi = (_num(c.get("lo")), _num(c.get("hi"))) if c else (None, None)
        diff = None if now is None or then is None else now - then
        inside = None if now is None or lo is None or hi is None else lo <= now <= hi
        out.append(
            {
                "claim": r["id"],
                "committed": then,
                "committed_lo": lo,
                "committed_hi": hi,
                "this_run": now,
                "difference": diff,
                "inside_committed_ci": inside,
                "committed_verdict": c["verdict"] if c else None,
                "verdict": r["verdict"],
                "verdict_changed": c is None or c["verdict"] != r["verdict"],
            }
        )
    return out


def compare_runs(metrics: str | Path, root: str | Path = ".") -> list[dict]:
    """Per image run and seed of this run (``metrics/image/eval/*.json``): IID and OOD Acc@1, this
    run's minus the committed one's (None where the committed run has no such file)."""
    out = []
    for f in sorted((Path(metrics) / "image" / "eval").glob("*.json")):
        now = json.loads(f.read_text(encoding="utf-8"))
        text = committed(f"{EVAL}/{f.name}", root)
        then = json.loads(text) if text else {}
        row = {"run": f.stem}
        for k in ("iid_acc1", "ood_acc1"):
            row[k] = None if k not in then or k not in now else float(now[k]) - float(then[k])
        out.append(row)
    return out


# timings: they differ from run to run by nature and are not compared (paths matched anywhere in the key)
TIMED = re.compile(r"images_per|per_s\b|_per_cpu_s|speedup|load_average|seconds|wall_s|steps_per")
TIMED_FILES = ("costs/throughput.json",)


def _leaves(x: Any, at: str = "") -> dict[str, float]:
    """Every number in a JSON value, by its path (``a.b[2].c``)."""
    if isinstance(x, bool):
        return {}
    if isinstance(x, (int, float)):
        return {at: float(x)}
    if isinstance(x, dict):
        return {k: v for key, val in x.items() for k, v in _leaves(val, f"{at}.{key}" if at else str(key)).items()}
    if isinstance(x, list):
        return {k: v for i, val in enumerate(x) for k, v in _leaves(val, f"{at}[{i}]").items()}
    return {}


def compare_all(metrics: str | Path, root: str | Path = ".") -> dict:
    """Every number of every JSON file under ``metrics`` (the report's inputs: accuracies, mechanism
    numbers, the NLVR analysis, the claims' own) against the committed file's, timings apart
    (``TIMED``): ``{"files", "numbers", "differ": [{file, key, committed, this_run, difference}], "new"}``."""
    metrics, out = Path(metrics), {"files": 0, "numbers": 0, "differ": [], "new": []}
    for f in sorted(metrics.rglob("*.json")):
        rel = f.relative_to(metrics).as_posix()
        if rel in TIMED_FILES:
            continue
        text = committed(f"metrics/{rel}", root)
        if text is None:
            out["new"].append(rel)
            continue
        try:
            now, then = _leaves(json.loads(f.read_text(encoding="utf-8"))), _leaves(json.loads(text))
        except ValueError:
            continue
        out["files"] += 1
        for key in sorted(set(now) | set(then)):
            if TIMED.search(key):
                continue
            out["numbers"] += 1
            a, b = now.get(key), then.get(key)
            if a != b and not (a is not None and b is not None and math.isnan(a) and math.isnan(b)):
                diff = None if a is None or b is None else a - b
                out["differ"].append({"file": rel, "key": key, "committed": b, "this_run": a, "difference": diff})
    return out


def _every_metric_lines(every: dict) -> list[str]:
    d = every["differ"]
    lines = [
        "",
        "## Every metric (timings apart)",
        "",
        f"{len(d)} of {every['numbers']} numbers in {every['files']} committed metrics files differ"
        + (f"; {len(every['new'])} file(s) new in this run" if every["new"] else "")
        + ".",
    ]
    if not d:
        return lines
    by_file: dict[str, list[dict]] = {}
    for row in d:
        by_file.setdefault(row["file"], []).append(row)
    lines += ["", "| file | numbers that differ | largest difference (key) |", "|---|---|---|"]
    for f, rows in sorted(by_file.items(), key=lambda t: -len(t[1])):
        big = max(rows, key=lambda r: abs(r["difference"]) if r["difference"] is not None else math.inf)
        size = "absent in one run" if big["difference"] is None else f"{big['difference']:+.3g}"
        lines.append(f"| `{f}` | {len(rows)} | {size} (`{big['key']}`) |")
    return lines


def _fmt(x: float | None, signed: bool = False) -> str:
    return "—" if x is None else (f"{x:+.2f}" if signed else f"{x:.2f}")


def page(params: dict, rows: list[dict], metrics: str | Path = "metrics", root: str | Path = ".") -> str:
    """The Markdown of ``reports/reproduction.md``."""
    lines = ["# Reproduction check: this run against the committed one", ""]
    locked = read_lock(Path(root) / "requirements.lock")
    env = differences(locked, installed())
    lines.append(
        "Environment: "
        + (
            "no `requirements.lock`: the committed run's environment is not recorded."
            if not locked
            else "every installed package matches `requirements.lock` (the committed run's environment), "
            "so every number should match the committed one bit for bit."
            if not env
            else f"{len(env)} package(s) differ from `requirements.lock` (the committed run's): {', '.join(env)}. "
            "Numbers are expected to differ within their noise; `pip install -r requirements.lock` reproduces "
            "them bit for bit."
        )
    )
    lines.append("")
    then = committed_params(root)
    csv = committed(CLAIMS_CSV, root)
    if then is None or csv is None:
        return "\n".join(
            [*lines, "No committed run to compare with (no report stage in `dvc.lock` and claims at git HEAD).", ""]
        )
    differ = params_differ(params, then)
    if differ:
        return "\n".join(
            [
                *lines,
                f"Not compared: this run's params differ from those the committed report ran with (`dvc.lock` at git "
                f"HEAD) in {', '.join(differ)}.",
                "",
            ]
        )
    claims = compare_claims(rows, csv)
    changed = [c for c in claims if c["verdict_changed"]]
    outside = [c for c in claims if c["inside_committed_ci"] is False]
    runs = compare_runs(metrics, root)
    every = compare_all(metrics, root)
    diffs = [abs(r[k]) for r in runs for k in ("iid_acc1", "ood_acc1") if r[k] is not None]
    differing = [r for r in runs if any(r[k] not in (None, 0.0) for k in ("iid_acc1", "ood_acc1"))]
    flips = ", ".join(f"`{c['claim']}` {c['committed_verdict']} → {c['verdict']}" for c in changed)
    spread = f" (mean |difference| {sum(diffs) / len(diffs):.2f} points, at most {max(diffs):.2f})" if differing else ""
    lines += [
        f"**{len(changed)} of {len(claims)} verdicts changed**"
        + (f" ({flips})" if changed else "")
        + f"; {len(outside)} estimate(s) outside the committed 95% CI. "
        + f"{len(differing)} of {len(runs)} image runs differ in accuracy{spread}; "
        + f"{len(every['differ'])} of {every['numbers']} metric numbers differ (every metrics file, timings apart).",
        "",
        "## Claims",
        "",
        "| claim | committed (95% CI) | this run | difference | inside the committed CI "
        "| committed verdict | this verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in claims:
        ci = f"{_fmt(c['committed'])} [{_fmt(c['committed_lo'])}, {_fmt(c['committed_hi'])}]"
        inside = {None: "—", True: "yes", False: "**no**"}[c["inside_committed_ci"]]
        verdict = f"**{c['verdict']}**" if c["verdict_changed"] else c["verdict"]
        lines.append(
            f"| `{c['claim']}` | {ci} | {_fmt(c['this_run'])} | {_fmt(c['difference'], True)} | {inside} "
            f"| {c['committed_verdict'] or '—'} | {verdict} |"
        )
    lines += ["", "## Image runs (Acc@1, this run − committed, points)", "", "| run | IID | OOD |", "|---|---|---|"]
    lines += [f"| `{r['run']}` | {_fmt(r['iid_acc1'], True)} | {_fmt(r['ood_acc1'], True)} |" for r in runs]
    lines += _every_metric_lines(every)
    return "\n".join([*lines, ""])


def write_reproduction(out: str | Path, params: dict, rows: list[dict], metrics: str | Path = "metrics") -> Path:
    """Write ``out/reproduction.md`` (the report's staging folder) from the claims' ``rows``."""
    path = Path(out) / PAGE
    path.write_text(page(params, rows, metrics), encoding="utf-8")
    return path
