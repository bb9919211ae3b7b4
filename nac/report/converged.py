"""The converged profile's report from its committed pieces (``nac.converged.pieces``;
``tools/run_converged.py`` writes them): ``reports/converged/``.

- ``pieces.md``: every piece (done, stale, missing), where it ran, and for each claim the pieces it
  reads, how many are missing and the seeds where a pair it compares ran on different kinds of
  device;
- ``claims.md``: each claim whose pieces are all present (and not stale), judged by the claims
  registry's own rules (``nac.report.claims``) on the metrics tree the pieces make together; the
  others "not judged" with the number of their pieces missing;
- once every piece is present, the whole report as for any profile (``nac.report.build``: tables,
  figures, ``README.md``), else a ``README.md`` saying what is done and what is left.

Which pieces a claim needs is read, not declared: the claim is evaluated on the pieces' metrics
with a reader that records every file it asks for. A claim stops at the first file it lacks, so
for a claim not judged the count is a lower bound where it says so.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from nac.converged import pieces as P
from nac.converged import records as R
from nac.converged.gpu_proof import summary
from nac.pipeline.params import compose
from nac.pipeline.paths import paper_throughput
from nac.provenance import PROVENANCE
from nac.report.claims import csv_frame, power_text, test_text
from nac.report.claims.metrics import Metrics
from nac.report.claims.registry import Context, registered
from nac.report.claims.rules import NOT_MEASURED, NOT_SUPPORTED, RULE, SUPPORTED, UNDECIDED

PROFILE = "converged"
COMMAND = "python tools/run_converged.py --budget MINUTES"
NOT_JUDGED = "not judged"


class TracedMetrics(Metrics):
    """``Metrics`` recording what it was asked for (files, and prune curves by run and seed)."""

    def __init__(self, root: Path, params: dict):
        super().__init__(root, params)
        self.asked: set[str] = set()

    def json(self, rel: str) -> Any:
        self.asked.add(rel)
        return super().json(rel)

    def per_seed(self, folder, runs, key, configured):
        self.asked |= {f"{folder}/{r}-{s}.json" for r in runs for s in self.seeds}
        return super().per_seed(folder, runs, key, configured)

    def prune_curve(self, run: str, seed: int, order: str = "connectivity") -> list[dict]:
        self.asked.add(f"prune:{run}-{seed}")
        return super().prune_curve(run, seed, order)

    def mechanism(self, run: str, phase: str) -> list[dict]:
        self.asked |= {f"image/train/{run}-{s}.json" for s in self.seeds}
        return super().mechanism(run, phase)

    def image_eval(self, run: str, key: str) -> list[Any]:
        self.asked |= {f"image/eval/{run}-{s}.json" for s in self.seeds}
        return super().image_eval(run, key)


def pieces_of(asked: set[str], params: dict) -> set[P.Piece]:
    """The pieces whose files ``asked`` names."""
    out: set[P.Piece] = set()
    fewshot = {p for p in P.plan(params) if P.fewshot_runs(params, p) and P.fewshot_episodes(params, p)}
    for rel in asked:
        parts = rel.split("/")
        if rel.startswith("prune:"):
            run, seed = rel[len("prune:") :].rsplit("-", 1)
            out.add(P.Piece("image", run, int(seed)))
        elif parts[0] == "image" and len(parts) == 3 and parts[1] in ("train", "eval"):
            run, seed = parts[2][: -len(".json")].rsplit("-", 1)
            out.add(P.Piece("image", run, int(seed)))
        elif parts[0] == "tracks" and len(parts) == 3:
            run, seed = parts[2][: -len(".json")].rsplit("-", 1)
            out.add(P.Piece(parts[1], run, int(seed)))
        elif parts[0] == "fewshot":
            out |= fewshot
        elif parts[0] == "nlvr":
            out |= {p for p in P.plan(params) if P.analyses(params, p)}
    return out


def judge(
    params: dict,
    metrics: Path,
    done: set[P.Piece],
    kinds: dict[P.Piece, str],
    damaged: dict[P.Piece, str] | None = None,
    dirty: set[P.Piece] | None = None,
) -> list[dict]:
    """One row per claim (``nac.report.claims`` FIELDS, plus ``pieces``, ``missing``, ``lower_bound``,
    ``devices``): judged by its rule where every piece it reads is done, else ``NOT_JUDGED`` (the
    reason names the missing pieces, and what is wrong with a damaged one). A judged claim that reads
    a piece written from a dirty tree (``dirty``) says so first in its reason."""
    damaged, dirty = damaged or {}, dirty or set()
    rows = []
    for cl in registered():
        for cid, args in cl.ids(params):
            m = TracedMetrics(metrics, params)
            c = Context(params, m)
            row = cl.row(c, cid, args)
            stopped = row["reason"].startswith("not measured")
            need = pieces_of(m.asked, params)
            missing = sorted((p for p in need if p not in done), key=lambda p: p.id)
            mixed = []
            for seed in sorted({p.seed for p in need}):
                on = {kinds[p] for p in need if p.seed == seed and p in kinds}
                if len(on) > 1:
                    mixed.append(f"seed {seed}: {', '.join(sorted(on))}")
            row.update(pieces=len(need), missing=len(missing), lower_bound=bool(missing) and stopped, devices=mixed)
            row["missing_ids"] = [p.id for p in missing]
            if missing:
                hurt = [f"{p.id} (damaged: {damaged[p]})" for p in missing if p in damaged]
                row.update(
                    verdict=NOT_JUDGED,
                    ours="—",
                    estimate=None,
                    lo=None,
                    hi=None,
                    n=0,
                    reason=f"{'at least ' if row['lower_bound'] else ''}{len(missing)} piece(s) missing: "
                    + ", ".join(row["missing_ids"][:6])
                    + (" ..." if len(missing) > 6 else "")
                    + (f"; {'; '.join(hurt[:3])}" if hurt else ""),
                )
            elif dirty_read := sorted(p.id for p in need if p in dirty):
                row["reason"] = (
                    f"dirty: {len(dirty_read)} piece(s) written from a checkout with uncommitted changes "
                    f"({', '.join(dirty_read[:3])}{' ...' if len(dirty_read) > 3 else ''}); " + row["reason"]
                )
            rows.append(row)
    return rows


def _esc(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _claims_md(params: dict, rows: list[dict], n_done: int, n_all: int) -> str:
    verdicts = (SUPPORTED, NOT_SUPPORTED, UNDECIDED, NOT_MEASURED, NOT_JUDGED)
    counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in verdicts}
    lines = [
        "# The paper's claims at the plateau (converged profile, from its pieces)",
        "",
        f"Profile **{params['profile']}**, seeds {list(params['seeds'])}; {n_done} of {n_all} pieces done. A claim "
        f"is judged only when every piece it reads is done under the committed code and params; each verdict is "
        "the claims registry's own rule (the same as the main report's).",
        "",
        "Summary: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + f" of {len(rows)} claims.",
        "",
        RULE,
        "## Claims",
        "",
        "| id | verdict | claim | our measurement (95% CI) | deciding test | power | δ | pieces read | missing | "
        "devices differ | reason |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        miss = f"{'>= ' if r['lower_bound'] else ''}{r['missing']}"
        judged = r["verdict"] != NOT_JUDGED
        test = _esc(test_text(r.get("deciding"))) if judged else "—"
        power = _esc(power_text(r.get("power") or {}) or "—") if judged else "—"
        lines.append(
            f"| {r['id']} | **{r['verdict']}** | {_esc(r['claim'])} | {_esc(r['ours'])} | {test} | {power} | "
            f"{_esc(r.get('delta') or '—')} | {r['pieces']} | {miss} | {_esc('; '.join(r['devices'])) or '—'} | "
            f"{_esc(r['reason'])} |"
        )
    return "\n".join(lines) + "\n"


def _minutes(rec: dict) -> str:
    """A piece's wall time: every stretch's when it resumed (``nac.converged.jobs.Stretches``), else its one."""
    st = rec.get("stretches") or []
    if len(st) > 1:
        where = ", ".join(sorted({x.get("device_kind") or "?" for x in st}))
        return f"{rec.get('wall_s_total', 0) / 60:.1f} ({len(st)} stretches: {where})"
    return f"{rec['wall_s'] / 60:.1f}" if "wall_s" in rec else ""


def _pieces_md(params: dict, rows: list, claims: list[dict], proofs: str = "") -> str:
    lines = [
        "# Converged pieces",
        "",
        f"Profile **{params['profile']}**: one piece per model and seed of a track "
        '(docs/convergence.md, "Running it in pieces"); written by `' + COMMAND + "`.",
        "",
    ]
    counts = {s: sum(1 for r in rows if r[1] == s) for s in P.STATUSES}
    lines.append(f"{len(rows)} pieces: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + ".")
    lines += ["", "## What the equality proofs cover", "", proofs]
    mixed = [(c["id"], c["devices"]) for c in claims if c["devices"]]
    lines += ["", "## Pairs compared by seed on different kinds of device", ""]
    none = "None: each claim's pieces of a seed ran on one kind."
    lines += [f"- {cid}: {'; '.join(d)}" for cid, d in mixed] or [none]
    lines += ["", "## Pieces", "", "| piece | status | device | minutes | commit | note |", "|---|---|---|---|---|---|"]
    for p, st, rec, why in rows:
        rec = rec or {}
        mins = _minutes(rec)
        note = f"its {why} changed since" if st == "stale" else why
        commit = (rec.get("commit") or "")[:7] + (" (dirty)" if rec.get("dirty") else "")
        lines.append(f"| {p.id} | {st} | {rec.get('device_kind', '')} | {mins} | {commit} | {note} |")
    return "\n".join(lines) + "\n"


def section(
    results: str | Path, out: str | Path, root: str | Path, profile: str = PROFILE, *, build: Callable[..., Any]
) -> str | None:
    """Build ``out/converged/`` from ``results/pieces/<profile>/``; returns the index's line, or
    None when no piece of the profile is written (the caller then says how to make them). ``build``:
    the whole report's builder (``nac.report.build.build_report``, passed in: that module calls this one)."""
    results, out, root = Path(results), Path(out), Path(root)
    pieces_root = results / "pieces"
    if not (pieces_root / profile).is_dir():
        return None
    # the profile's params, as tools/run_converged.py (which wrote the pieces) validated them
    params = compose([f"profile={profile}"], conf_dir=root / "conf")
    rows = P.status(pieces_root, profile, params, root)
    if not any(rec is not None for _, _, rec, _ in rows):
        return None
    claims = _build(pieces_root, profile, params, rows, root, out / "converged", summary(results, profile), build)
    done = sum(1 for r in rows if r[1] == "done")
    judged = [c for c in claims if c["verdict"] != NOT_JUDGED]
    return (
        f"Converged profile, from its pieces: {done} of {len(rows)} done "
        f"({sum(1 for r in rows if r[1] == 'stale')} stale); {len(judged)} of {len(claims)} claims judged, "
        f"the others wait for pieces: [converged/claims.md](converged/claims.md), "
        f"[converged/pieces.md](converged/pieces.md)."
    )


def record_section(folder: str | Path, out: str | Path, root: str | Path, *, build: Callable[..., Any]) -> str:
    """Build ``out/records/<name>/`` from a record (``nac.converged.records``): its pieces judged
    with the params it was archived with, by today's report code, headed by what it is and what it
    could and could not show; returns the index's line. ``build``: as ``section``'s."""
    folder, out, root = Path(folder), Path(out), Path(root)
    rec = R.read(folder)
    params, profile = rec["params"], rec["profile"]
    rows = R.status(folder, rec)
    proofs = (
        f"A record: read against the params it was archived with (commit `{rec['commit'][:7]}`, "
        f"{rec['archived']}), not against today's code; its pieces are checked for being whole only. "
        + (
            f"{len(P.equal_code(folder / 'pieces'))} proof(s) of equal code carried its pieces to that commit."
            if P.equal_code(folder / "pieces")
            else ""
        )
        + " "
        + summary(folder, profile)
    )
    dest = out / "records" / rec["name"]
    claims = _build(folder / "pieces", profile, params, rows, root, dest, proofs, build, record=rec)
    done = sum(1 for r in rows if r[1] == "done")
    judged = sum(1 for c in claims if c["verdict"] != NOT_JUDGED)
    return (
        f"**Record: {rec['title']}** ({done} of {len(rows)} pieces whole, {judged} of {len(claims)} claims judged; "
        f"archived {rec['archived'][:10]} at `{rec['commit'][:7]}`): "
        f"[records/{rec['name']}/README.md](records/{rec['name']}/README.md). "
        f"It could show: {rec['could_show']} It could not show: {rec['could_not_show']}"
    )


def _record_head(rec: dict) -> str:
    return (
        f"> **The record of an earlier benchmark: {rec['title']}.** Archived {rec['archived']} at commit "
        f"`{rec['commit'][:7]}` ({rec['pieces']} pieces, profile {rec['profile']}); read with the params it ran under, "
        f"by today's report code. It could show: {rec['could_show']} It could not show: {rec['could_not_show']}\n\n"
    )


def _headed(text: str, head: str) -> str:
    """``text`` with ``head`` under its first line (the page's title)."""
    first, _, rest = text.partition("\n")
    return f"{first}\n\n{head}{rest.lstrip()}"


def _build(
    pieces_root: Path,
    profile: str,
    params: dict,
    rows: list,
    root: Path,
    dest: Path,
    proofs: str,
    build: Callable[..., Any],
    record: dict | None = None,
) -> list[dict]:
    """The report of a set of pieces into ``dest`` (claims.md, pieces.md, and once every piece is
    done the whole report); a record's pages open with what it is. Returns the judged claims."""
    done = {p for p, st, _, _ in rows if st == "done"}
    kinds = {p: rec["device_kind"] for p, st, rec, _ in rows if st == "done"}
    damaged = {p: why for p, st, _, why in rows if st == "damaged"}
    dirty = {p for p, st, rec, _ in rows if st == "done" and rec.get("dirty")}
    head = _record_head(record) if record else ""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        metrics = tmp / "set" / "metrics"
        P.assemble(pieces_root, profile, params, sorted(done, key=lambda p: p.id), metrics)
        # paper-size timings: the throughput stage's, not a piece, read as mini's report reads it, under metrics/
        if paper_throughput(root / "metrics").is_file():
            paper_throughput(metrics).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(paper_throughput(root / "metrics"), paper_throughput(metrics))
        claims = judge(params, metrics, done, kinds, damaged, dirty)
        stage = tmp / "converged"
        complete = len(done) == len(rows)
        if complete:  # the whole report, as any profile's, from the pieces' metrics
            recs = [rec for _, _, rec, _ in rows]
            label = {
                "profile": profile,
                "commit": ", ".join(sorted({(r.get("commit") or "unknown")[:7] for r in recs})),
                "date": f"{min(r['start'] for r in recs)} to {max(r['end'] for r in recs)}",
                "machine": ", ".join(sorted({r["machine"] for r in recs})),
                "device": ", ".join(sorted({r["device_kind"] for r in recs})),
                "torch": torch.__version__,
            }
            (metrics.parent / PROVENANCE).write_text(
                json.dumps(label), encoding="utf-8"
            )  # graphs.json beside it: Figure 3
            build(params, stage, metrics, provenance=label, converged=None)
            if head:
                readme = stage / "README.md"
                readme.write_text(_headed(readme.read_text(encoding="utf-8"), head), encoding="utf-8")
        else:
            stage.mkdir()
            n_missing = sum(1 for r in rows if r[1] != "done")
            what = "damaged or missing" if record else "missing or stale"
            how = "Restore them from git." if record else f"`{COMMAND}` runs the next ones."
            (stage / "README.md").write_text(
                f"# Converged profile: {len(done)} of {len(rows)} pieces done\n\n{head}"
                f"{n_missing} pieces are {what}, so the whole report (tables, figures) waits for "
                f"them; [claims.md](claims.md) judges every claim whose pieces are all done, "
                f"[pieces.md](pieces.md) lists the pieces. {how}\n",
                encoding="utf-8",
            )
            # the judged claims for the findings screen's converged column (the whole report writes its own)
            (stage / "tables").mkdir()
            csv_frame(claims).to_csv(stage / "tables" / "claims.csv", index=False)
        claims_md = _claims_md(params, claims, len(done), len(rows))
        pieces_md = _pieces_md(params, rows, claims, proofs)
        if head:
            claims_md, pieces_md = _headed(claims_md, head), _headed(pieces_md, head)
        (stage / "claims.md").write_text(claims_md, encoding="utf-8")
        (stage / "pieces.md").write_text(pieces_md, encoding="utf-8")
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(stage, dest)
    return claims
