"""The findings screen at the top of reports/README.md: one line per claim, in plain words
(``findings.yaml``), with the paper's number, ours (estimate, 95% CI, n), the verdict and the
control it was judged against; a converged column where a converged result set has been reported."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pandas as pd
import yaml

from nac.report.claims import sensitivity_text
from nac.report.claims.registry import JSON_FIELDS
from nac.report.claims.rules import VERDICTS

FINDINGS_FILE = Path(__file__).with_name("findings.yaml")
FIELDS = ("words", "paper", "unit", "control")
UNITS = {"pts": " pts", "x": "×", "frac": "", "nats": " nats", "": ""}
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def load(path: Path = FINDINGS_FILE) -> dict[str, dict[str, str]]:
    """``findings.yaml``: claim name -> its ``FIELDS``, each checked (a clear error names the entry)."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of claim name -> {{{', '.join(FIELDS)}}}")
    for name, entry in data.items():
        if (
            not isinstance(entry, dict)
            or set(entry) != set(FIELDS)
            or not all(isinstance(entry[k], str) for k in FIELDS)
        ):
            raise ValueError(f"{path}: entry {name!r} must have exactly the string fields {FIELDS}, got {entry!r}")
        if entry["unit"] not in UNITS:
            raise ValueError(f"{path}: entry {name!r} has unit {entry['unit']!r}; use one of {sorted(UNITS)}")
    return data


def entry_for(cid: str, entries: dict[str, dict[str, str]], names: list[str]) -> dict[str, str]:
    """The entry of claim id ``cid``: its own, or that of the registered name it expands (``fewshot``
    for ``fewshot_digits``, with ``{key}`` in ``words`` filled by the key)."""
    if cid in entries:
        return entries[cid]
    for name in names:
        if cid.startswith(name + "_") and name in entries:
            e = entries[name]
            return {**e, "words": e["words"].format(key=cid[len(name) + 1 :])}
    raise KeyError(f"claim {cid!r} has no entry in {FINDINGS_FILE.name}: add its words, paper, unit and control")


def _num(v) -> float | None:
    if v is None or v == "":
        return None
    v = float(v)
    return None if v != v else v


def _fmt(v: float, unit: str) -> str:
    if unit == "pts":
        return f"{v:+.1f}"
    if unit in ("x", "frac"):
        return f"{v:.2f}"
    return f"{v:.3g}"


def ours_text(row: dict, unit: str) -> str:
    """``+0.4 [-11.0, +11.7] pts, n = 3``; a single measurement without its CI; "—" when not measured."""
    est, lo, hi, n = (_num(row.get(k)) for k in ("estimate", "lo", "hi", "n"))
    if est is None:
        return "—"
    n_text = f"n = {int(n)}" if n is not None else "n = ?"
    ci = f" [{_fmt(lo, unit)}, {_fmt(hi, unit)}]" if lo is not None and hi is not None and lo != hi else ""
    return f"{_fmt(est, unit)}{ci}{UNITS[unit]}, {n_text}"


def control_text(row: dict, entry: dict[str, str]) -> str:
    """The entry's control, then any controls the claim's result names itself (a ``controls`` key)."""
    extra = row.get("controls") or []
    extra = [extra] if isinstance(extra, str) else [str(c) for c in extra]
    return "; ".join([entry["control"], *[c for c in extra if c not in entry["control"]]])


def read_rows(path: Path) -> list[dict] | None:
    """The rows of a report's ``tables/claims.csv``, or None when there is none."""
    if not Path(path).is_file():
        return None
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for r in rows:  # the deciding test, the power and the tests: JSON text in the CSV
        for k in JSON_FIELDS:
            r[k] = json.loads(r[k]) if r.get(k) else None
    return rows


def evidence_text(row: dict, unit: str) -> str:
    """The test that decided the verdict (where the claim has several) and its power, one cell:
    ``decided by <test>: +0.02 [+0.01, +0.03]; n = 5, detects 12.1 at 80%, the paper's 1.95 needs
    about 110``; the other tests are one click away (the claim's section in claims.md)."""
    bits = []
    d = row.get("deciding") or {}
    if d.get("name") and len(row.get("parts") or []) > 1:
        est, lo, hi = (_num(d.get(k)) for k in ("estimate", "lo", "hi"))
        ci = f" [{lo:+.3g}, {hi:+.3g}]" if lo is not None and hi is not None else ""
        val = f": {est:+.3g}{ci}" if est is not None else f": {d.get('reason', '')}"
        bits.append(f"decided by {d['name']}{val} ({len(row['parts'])} tests)")
    pw = row.get("power") or {}
    if pw.get("detectable") is not None:
        det = pw["detectable"]
        det_text = f"{det:.3g}" if det == det and det != float("inf") else "nothing"
        need = pw.get("needed")
        bits.append(
            f"n = {pw['n']}: detects {det_text} at 80% power; {pw['effect_from']} ({pw['effect']:.3g}) needs "
            + ("out of reach" if need is None else f"about {need}")
        )
    if row.get("verdict") == "undecided" and pw.get("why"):
        bits.append(pw["why"])
    if row.get("sensitivity"):  # the run gate: the claim read a run that did not train (docs/run-gate.md)
        bits.append(f"flagged run: {sensitivity_text(row['sensitivity'])}")
    return "; ".join(bits) or "—"


def converged_judged(converged: list[dict] | None) -> list[dict]:
    """The converged report's rows it judged (the others wait for pieces); empty when none."""
    return [r for r in converged or [] if r.get("verdict") in VERDICTS]


def findings_table(rows: list[dict], names: list[str], profile: str, converged: list[dict] | None = None) -> str:
    """The findings screen (Markdown): one row per claim in ``rows``' order; a ``converged`` column
    (ours and the verdict at the plateau) when the converged report's rows are given: first, before
    ``profile``'s, once it judged a claim, else last."""
    entries = load()
    conv = {r["id"]: r for r in converged or []}
    first = converged_judged(converged)
    out = []
    for r in rows:
        e = entry_for(r["id"], entries, names)
        if r["verdict"] not in VERDICTS:
            raise ValueError(f"claim {r['id']}: verdict {r['verdict']!r} is not one of {VERDICTS}")
        line = {"claim": f"[{e['words']}](claims.md#{r['id']})", "paper": e["paper"]}
        at_plateau = {}
        if converged is not None:
            c = conv.get(r["id"])
            judged = c is not None and c.get("verdict") in VERDICTS
            text = (
                f"{ours_text(c, e['unit'])}: **{c['verdict']}**"
                if judged
                else "not judged yet"
                if c is not None
                else "no such claim at the plateau (no runs longer than its own)"
            )
            at_plateau = {"at the plateau (converged) [95% CI], n: verdict": text}
        if first:
            line.update(at_plateau)
        line[f"ours ({profile}) [95% CI], n"] = ours_text(r, e["unit"])
        line["verdict" if converged is None else f"verdict ({profile})"] = f"**{r['verdict']}**"
        if not first:
            line.update(at_plateau)
        judged_at_plateau = converged is not None and first and conv.get(r["id"], {}).get("verdict") in VERDICTS
        which = conv[r["id"]] if judged_at_plateau else r
        said = evidence_text(which, e["unit"])
        line["evidence: the deciding test, its power"] = (
            f"at the plateau: {said}" if judged_at_plateau else f"{profile}: {said}" if converged else said
        )
        line["judged against"] = control_text(r, e)
        out.append(line)
    return pd.DataFrame(out).to_markdown(index=False)


def converged_counts_line(converged: list[dict] | None) -> str | None:
    """``**At the plateau** (...): 1 supported, ... of the 13 claims judged so far; 19 wait for
    pieces (...)``, once the converged report judged a claim; else None."""
    judged = converged_judged(converged)
    if not judged:
        return None
    waiting = len(converged) - len(judged)
    return (
        "**At the plateau** (converged profile, judged from its pieces; [converged/claims.md]"
        f"(converged/claims.md)): {counts_line(judged).rsplit(' (', 1)[0]} of the {len(judged)} claims "
        f"judged so far; {waiting} wait for pieces ([converged/pieces.md](converged/pieces.md))."
    )


def counts_line(rows: list[dict]) -> str:
    """``8 supported, 3 not supported, 17 undecided, 4 not measured (32 claims)``."""
    got = pd.Series([r["verdict"] for r in rows]).value_counts()
    return ", ".join(f"{int(got.get(v, 0))} {v}" for v in VERDICTS) + f" ({len(rows)} claims)"


def paper_numbers(text: str) -> set[str]:
    """The numbers written in ``text`` (``+1.95`` -> ``1.95``), for the consistency test."""
    return {m.group(0) for m in NUMBER.finditer(text)}


README_BEGIN = "<!-- results: generated by `python tools/readme_results.py` from reports/tables/claims.csv -->"
README_END = "<!-- results: end -->"


def readme_results(
    rows: list[dict],
    names: list[str],
    profile: str,
    seeds: list[int],
    converged: list[dict] | None = None,
    records: list[tuple[str, str, list[dict] | None]] = (),
) -> str:
    """The repository README's results block: the verdict counts, then every verdict class with
    its claims in plain words (supported and not supported with our number), failures included;
    first, once the converged report judged a claim, those verdicts at the plateau; then each
    record of an earlier benchmark's converged run (``records``: ``(name, title, its claims rows)``),
    labelled as such."""
    entries = load()
    plateau = []

    def verdicts(judged: list[dict]) -> str:
        said = []
        for r in judged:
            e = entry_for(r["id"], entries, names)
            said.append(f"{e['words']}: **{r['verdict']}** ({ours_text(r, e['unit'])})")
        return "; ".join(said)

    if judged := converged_judged(converged):
        plateau = [
            f"**At the plateau** (converged profile, from its pieces, {len(judged)} of {len(converged)} claims "
            f"judged so far: [reports/converged/claims.md](reports/converged/claims.md)): " + verdicts(judged) + ".",
            "",
        ]
    for name, title, rec_rows in records:
        if judged := converged_judged(rec_rows):
            plateau += [
                f"**At the plateau on an earlier benchmark** (the record of {title}; {len(judged)} of "
                f"{len(rec_rows)} claims judged: [reports/records/{name}/claims.md](reports/records/{name}/claims.md), "
                "what it could and could not show at its head): " + verdicts(judged) + ".",
                "",
            ]
    by: dict[str, list[str]] = {v: [] for v in VERDICTS}
    for r in rows:
        e = entry_for(r["id"], entries, names)
        with_number = r["verdict"] in VERDICTS[:2]
        by[r["verdict"]].append(e["words"] + (f" ({ours_text(r, e['unit'])})" if with_number else ""))
    seed_text = ", ".join(str(s) for s in seeds)
    lines = [
        README_BEGIN,
        *plateau,
        f"**{len(rows)} claims, profile `{profile}` (seeds {seed_text}): {counts_line(rows).rsplit(' (', 1)[0]}** "
        "([the findings](reports/README.md#findings), each claim's rule: [reports/claims.md](reports/claims.md)).",
        "",
    ]
    what = {
        "undecided": "undecided (the 95% CI reaches both sides of the claim's threshold)",
        "not measured": "not measured here",
    }
    for v in VERDICTS:
        if by[v]:
            name = what.get(v, v)
            lines.append(f"- **{name[0].upper() + name[1:]}**: " + "; ".join(by[v]) + ".")
    lines.append(README_END)
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    """``text`` with its results block (between ``README_BEGIN`` and ``README_END``) replaced."""
    if README_BEGIN not in text or README_END not in text:
        raise ValueError(f"README.md has no results block: add the lines {README_BEGIN!r} and {README_END!r}")
    head, rest = text.split(README_BEGIN, 1)
    return head + block + rest.split(README_END, 1)[1]
