"""Build reports/ from metrics/: tables (Markdown + CSV), figures (PNG + SVG), the data of the
`dvc plots` curves (reports/plots/), the index README and claims.md. Only the runs and seeds
named in params.yaml are read, so stale metrics of runs no longer configured never leak into a
table."""

from __future__ import annotations

import datetime as dt
import json
import platform
import re
import shutil
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import pandas as pd
import torch

from nac import metrics_io
from nac import provenance as prov_io
from nac.checkpoint_io import load_model
from nac.converged.records import all_records
from nac.environment import installed
from nac.pipeline.datasets import builder, dataset_info
from nac.pipeline.io import staged, write_json
from nac.pipeline.paths import MODELS, image_checkpoint, paper_throughput, parse_run
from nac.pipeline.pool import usable_cores
from nac.repo import ROOT
from nac.report import (
    bench_figures,
    costs,
    figures,
    graph_figures,
    mechanism,
    modular_network,
    sections,
    switches,
    tables,
)
from nac.report.claims import claims_metrics, evaluate_claims, gate, headline, registered, write_claims
from nac.report.claims.metrics import CONVERGENCE
from nac.report.converged import record_section, section
from nac.report.findings import converged_counts_line, counts_line, findings_table, read_rows
from nac.report.published import (
    FEWSHOT_CLAIM,
    LRA_LEADERBOARD_TRANSFORMER,
    RUN_LABELS,
    TABLE2,
    TABLE3,
    discrepancies,
)
from nac.report.reproduction import write_reproduction
from nac.report.sections import caption, plot_csv
from nac.report.style import setup

# The converged profile's kept result set (tools/run_converged.py) and its Figure 3 graphs
CONVERGED = Path("results/converged")
GRAPHS = "graphs.json"
# The report's prose: Markdown templates beside this file (templates/README.md.j2), filled with the
# computed tables and numbers. A block tag alone on its line leaves no blank line behind; a name the
# template uses but the code does not pass is an error, not an empty string.
TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).with_name("templates")),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    autoescape=False,
)


def _provenance(params: dict) -> dict:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "nac", "stages", "conf", "dvc.yaml"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        commit += " (with uncommitted code changes)" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown (not a git checkout)"
    device = (
        torch.cuda.get_device_name()
        if torch.cuda.is_available()
        else f"CPU ({platform.machine()}, {usable_cores()} cores)"
    )
    return {
        "profile": params["profile"],
        "commit": commit,
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.node() or 'unknown host'}, {device}",
        "torch": torch.__version__,
        "packages": installed(),  # every installed version (nac.environment; the committed run's: requirements.lock)
    }


def build_report(
    params: dict,
    out: str | Path = "reports",
    metrics: str | Path = "metrics",
    provenance: dict | None = None,
    converged: str | Path | None = CONVERGED,
    models: str | Path = MODELS,
    *,
    root: str | Path,
) -> dict[str, Any]:
    """Every table, figure and the index README, then ``reports/claims.md``; returns summary.json.

    ``metrics``: the results root read (``metrics/``, or a kept result set's, e.g.
    ``results/converged/metrics``); ``provenance``: that result set's (``nac.provenance``),
    else this checkout's, and then the headline claims go to ``metrics/summary.json`` (a DVC
    metric), else beside the report (``tables/headline.json``): a kept result set is not rewritten.
    ``converged``: the converged result set, built into ``out/converged/`` and linked from the index
    when it exists (one line saying how to make it when not); ``None`` for a result set's own report.
    ``models``: the checkpoints' root (the learned graphs of Figure 3 are read from ``<models>/image``).
    ``root``: the repository folder whose committed benchmark results (``bench/results/``) and cost
    counts (``metrics/costs/``) the engineering sections read (the stage passes ``nac.repo.ROOT``);
    the report names them relative to it."""
    setup()
    out, metrics, root = Path(out), Path(metrics), Path(root)
    validate_inputs(params, metrics)  # every file it reads, before anything is written
    kept = provenance is not None  # a kept result set's report: its provenance, its metrics untouched
    converged_md = _converged(converged, out, root) if converged is not None else ""
    if converged is not None:  # the records of earlier benchmarks (nac.converged.records), each its own report
        converged_md = "\n\n".join(x for x in (converged_md, *_records(converged, out, root)) if x)
    md: dict[str, str] = {}
    figs: dict[str, list[Path]] = {}
    # all or nothing: built in staging folders that replace the files of out/ and metrics/summary.json
    # only when every table, figure and claim is done; on any error the previous report is untouched
    with staged(out, *(() if kept else (metrics,)), clean=("tables", "figures", "plots")) as stages:
        stage, stage_metrics = stages[0], (stages[0] / "tables" if kept else stages[1])
        prov = provenance or _provenance(params)
        md["caption_prov"] = prov  # type: ignore[assignment]
        md["caption"] = caption(prov, params["seeds"])  # every figure names profile, seeds and model version
        summary = {"provenance": prov, **_image(params, stage, metrics, models, md, figs, root)}
        md["converged"] = converged_md
        sections.switches_section(params, metrics, stage, md, root)
        summary["table2"] = sections.comparison(params, stage, metrics, md, ["points"], TABLE2, "table2")
        summary["table3"] = sections.comparison(params, stage, metrics, md, ["listops", "text"], TABLE3, "table3")
        summary["nlvr"] = sections.nlvr(params, stage, metrics, md, figs)
        summary["fewshot"] = sections.fewshot(params, stage, metrics, md, figs)
        sections.track_curves(params, stage, metrics, md, figs)
        if converged is not None:  # the Modular Network question, answered on the first benchmark's record
            modular_network.section(stage, md, figs, converged)
        gated = gate.judge(gate.training_records(metrics, params))  # the run gate, judged once
        rows = evaluate_claims(params, metrics, flags=gated[0])
        # the converged column: the converged report's claims (out/converged/, built above or by its own run)
        conv_rows = read_rows(out / "converged" / "tables" / "claims.csv") if converged is not None else None
        md["findings"] = findings_table(rows, [c.name for c in registered()], params["profile"], conv_rows)
        md["counts"] = counts_line(rows)
        md["converged_counts"] = converged_counts_line(conv_rows)
        _write_readme(stage, params, summary, md, figs, root)
        write_json(stage / "tables" / "summary.json", summary)
        write_json(stage_metrics / ("headline.json" if kept else "summary.json"), headline(rows))
        write_json(stage_metrics / ("claims_metrics.json" if kept else "claims.json"), claims_metrics(rows))
        write_claims(params, metrics=metrics, out=stage, rows=rows, gated=gated)
        if not kept:  # this run against the committed one (reports/reproduction.md)
            write_reproduction(stage, params, rows, metrics)
    return summary


def validate_inputs(params: dict, metrics: str | Path = "metrics") -> None:
    """Read and check every metrics file the report reads (``nac.metrics_io``): exactly
    the configured runs, seeds and targets, no extra file, every key typed and finite; raises
    ``MetricsError`` naming the first bad file. The sections of ``params`` absent are skipped."""
    metrics, seeds = Path(metrics), params["seeds"]
    if "image" in params:
        for kind in ("eval", "train"):
            metrics_io.image_runs(metrics, kind, params["image"]["ladder"], seeds)
        metrics_io.prune_rows(metrics / "image" / "prune.json", params["prune"]["runs"], seeds)
    for track in sections.TRACKS:
        if track in params:
            metrics_io.track_runs(metrics, track, params[track]["runs"], seeds)
    if "nlvr" in params:
        metrics_io.nlvr_analysis(metrics / "nlvr" / "analysis.json")
        metrics_io.nlvr_embedding(metrics / "nlvr" / "embedding.csv")
        metrics_io.nlvr_examples(metrics / "nlvr" / "examples.json")
    if "fewshot" in params:
        metrics_io.fewshot_targets(metrics, params["fewshot"]["targets"])


def _image(
    params: dict,
    out: Path,
    metrics: Path,
    models: str | Path,
    md: dict[str, str],
    figs: dict[str, list[Path]],
    root: Path,
) -> dict[str, Any]:
    """Table 1, Figures 3, 5a, 5b, 15 and the image learning curves; the convergence check from
    ``CONVERGENCE`` under the repository folder ``root``."""
    ladder, seeds = params["image"]["ladder"], params["seeds"]
    evals = metrics_io.image_runs(metrics, "eval", ladder, seeds)  # exactly the configured runs and seeds
    trains = metrics_io.image_runs(metrics, "train", ladder, seeds)
    parameters = {t["run"]: int(t["parameters"]) for t in trains if "parameters" in t}
    t1, t1_numeric = tables.table1(evals, ladder, parameters)
    md["table1"] = tables.write_table(t1, out / "tables", "table1")
    md["mechanism"] = tables.write_table(mechanism.mechanism_table(trains, evals, ladder), out / "tables", "mechanism")
    for phase in ("init", "final"):
        md[f"distance_{phase}"] = tables.write_table(
            mechanism.distance_table(trains, ladder, phase), out / "tables", f"mechanism_distance_{phase}"
        )
    degenerate = mechanism.degenerate_table(
        trains, ladder, int(params["image"]["model"]["n_processor"]), params["prior"]["name"]
    )
    if degenerate is not None:
        md["degenerate"] = tables.write_table(degenerate, out / "tables", "mechanism_degenerate")
    tables.write_table(t1_numeric, out / "tables", "table1_numeric")
    styles = tables.style_table(evals, ladder)
    if styles is not None:
        md["table1_styles"] = tables.write_table(styles, out / "tables", "table1_ood_by_style")

    learned = _learned_graphs(ladder, seeds[0], metrics, models)
    if learned is not None:
        figs["figure3"] = graph_figures.figure3(
            learned,
            params["image"]["model"]["n_processor"],
            out / "figures",
            caption=caption(md["caption_prov"], seeds[:1]),
        )
    prune = pd.DataFrame(metrics_io.prune_rows(metrics / "image" / "prune.json", params["prune"]["runs"], seeds))
    prune_runs = [r for r in params["prune"]["runs"] if r in set(prune["run"])]
    # Figure 5a: the NAC of the chosen `prior` group against Perceiver IO (paper: scale-free)
    main_runs = [r for r in (f"nac-{params['prior']['name']}", "perceiver_io") if r in prune_runs] or prune_runs
    cap = md["caption"]
    figs["figure5a"] = figures.figure5a(prune, out / "figures", prune_runs, main_runs[0], caption=cap)
    figs["figure5b"] = figures.figure5b(
        prune, out / "figures", prune_runs, str(prune["device"].iloc[0]), caption=caption(md["caption_prov"], seeds[:1])
    )
    if paper_throughput(metrics).exists():  # the throughput stage's (absent: the report says so)
        figs["figure5b_paper_size"] = bench_figures.figure_5b_paper_size(
            json.loads(paper_throughput(metrics).read_text(encoding="utf-8")), out / "figures"
        )
    figs["figure15"] = figures.figure15(prune, out / "figures", prune_runs, caption=cap)
    md["prune_random"] = tables.write_table(
        tables.prune_control_table(prune, prune_runs), out / "tables", "prune_connectivity_vs_random"
    )
    first = {e["run"]: e for e in evals if e["seed"] == seeds[0]}
    class_names = _class_names(params)
    baseline_fig = figures.figure_baselines(
        (first.get("modular_network") or {}).get("modular_usage"),
        (first.get("neural_interpreter") or {}).get("routing"),
        class_names,
        out / "figures",
        caption=caption(md["caption_prov"], seeds[:1]),
    )
    if baseline_fig:
        figs["baselines"] = baseline_fig
    histories = {run: [t["history"] for t in trains if t["run"] == run] for run in ladder}
    figs["learning_curves"] = figures.learning_curves(histories, out / "figures", caption=cap)
    # `dvc plots show`: Table 1's curves together, and accuracy as modules are dropped, one line per model
    curve = pd.DataFrame([{"run": t["run"], **h} for t in trains for h in t["history"]])
    plot_csv(
        curve.pivot_table(index="epoch", columns="run", values="val_acc1")[ladder].reset_index(),
        out / "plots" / "learning_curves",
        "image",
    )
    conn = prune[prune["order"] == "connectivity"] if "order" in prune else prune
    plot_csv(
        conn.pivot_table(index="dropped_fraction", columns="run", values="acc1")[prune_runs].reset_index(),
        out / "plots",
        "prune",
    )
    full = conn[conn["dropped"] == 0].set_index(["run", "seed"])["acc1"]
    rel = conn.assign(
        rel=[100.0 * a / max(full[(r, s)], 1e-9) for r, s, a in zip(conn["run"], conn["seed"], conn["acc1"])]
    )
    plot_csv(  # Figure 15: per seed relative to its own undropped model, then the mean over seeds
        rel.pivot_table(index="dropped_fraction", columns="run", values="rel")[prune_runs].reset_index(),
        out / "plots",
        "prune_relative",
    )
    conv_file = root / CONVERGENCE
    conv = json.loads(conv_file.read_text(encoding="utf-8")) if conv_file.exists() else None
    if conv is not None and conv.get("profile") == params["profile"]:  # another profile's runs say nothing of this one
        # the runs answer for this model only if they were trained under the committed settings
        md["convergence_current"] = "yes" if conv.get("params") == switches.bench_params(params) else ""
        figs["convergence"] = bench_figures.figure_convergence(
            conv, histories, RUN_LABELS, out / "figures", current=bool(md["convergence_current"]), caption=cap
        )
        md["convergence"] = tables.write_table(
            sections.convergence_table(conv, histories), out / "tables", "convergence"
        )
    return {
        "table1": {
            f"{r.run}/{r.metric}": {"mean": r.mean, "ci95": r.ci95, "paper": r.paper} for r in t1_numeric.itertuples()
        },
        "prune": sections.prune_summary(prune, prune_runs),
    }


def _learned_graphs(ladder: list[str], seed: int, metrics: Path, models: str | Path) -> dict[str, np.ndarray] | None:
    """Figure 3's learned link probabilities of each prior's NAC (first seed): from the checkpoints
    (models/image/), or, for a kept result set (a ``provenance.json`` beside its metrics), only from
    its ``graphs.json`` (models/ holds another profile's checkpoints), ``None`` without one."""
    if (metrics.parent / prov_io.PROVENANCE).is_file():
        kept = metrics.parent / GRAPHS
        if not kept.is_file():
            return None
        return {
            prior: np.asarray(p, dtype=np.float32) for prior, p in json.loads(kept.read_text(encoding="utf-8")).items()
        }
    learned = {}
    for run in ladder:
        variant, prior, control = parse_run(run)
        # a checkpoint absent here (a report rebuilt from the committed metrics alone) leaves its panel
        # saying so; under `dvc repro` models/image is a dependency, so every one is there
        if variant == "nac" and control is None and image_checkpoint(run, seed, models).is_file():
            learned[prior] = load_model(image_checkpoint(run, seed, models)).graph.link_probabilities().detach().numpy()
    return learned


def _image_classes(params: dict) -> int | str:
    """The image stand-in's class count for the report's prose ("?" where params or its info lack it)."""
    dataset = (params.get("image") or {}).get("dataset")
    info = dataset_info(params, dataset) if dataset else None
    return info["num_classes"] if info else "?"


def _records(results: str | Path, out: Path, root: Path) -> list[str]:
    """The records of earlier benchmarks' converged runs, built into ``out/records/<name>/``; the
    index's line for each (none when there is none)."""
    shutil.rmtree(Path(out) / "records", ignore_errors=True)  # a record removed from results/ leaves no page
    build = partial(build_report, root=root)
    return [record_section(folder, out, ROOT, build=build) for folder in all_records(results)]


def _converged(results: str | Path, out: Path, root: Path) -> str:
    """The converged result set's report, built into ``out/converged/`` from its own metrics and
    params (the same builders), and the index's lines about it; when it is absent, one line saying
    so and how to make one."""
    line = section(results, out, ROOT, build=partial(build_report, root=root))  # the pieces (tools/run_converged.py)
    if line is not None:
        return line
    got = prov_io.read(results)
    if got is None:
        shutil.rmtree(Path(out) / "converged", ignore_errors=True)  # pages of a run no longer committed
        return (
            f"No converged run is committed (`{prov_io.RESULTS}/` holds none): `{prov_io.COMMAND}` makes one "
            '(docs/convergence.md, "The converged profile").'
        )
    params, prov = got
    problems = prov_io.check(results, ROOT)  # against this checkout's code
    label = {
        "profile": prov["profile"],
        "commit": (prov.get("commit") or "unknown")[:7]
        + (" (with uncommitted code changes)" if prov.get("dirty") else ""),
        "date": f"{prov['start']} to {prov['end']}",
        "machine": prov["machine"],
        "device": prov["device"],
        "torch": torch.__version__,
    }
    summary = build_report(
        params, out / "converged", Path(results) / "metrics", provenance=label, converged=None, root=root
    )
    head, nac = summary["table1"], f"nac-{params['prior']['name']}"
    lines = [
        f"Converged results, kept apart from this report's: [converged/README.md](converged/README.md), profile "
        f"**{label['profile']}** ({len(params['seeds'])} seeds), commit `{label['commit']}`, {label['machine']}, "
        f"device {label['device']}, run {label['date']}; made by `{prov_io.COMMAND}` from `{prov_io.RESULTS}/`."
    ]
    for split in ("iid", "ood"):
        pair = [head.get(f"{run}/{split}_acc1") for run in (nac, "perceiver_io")]
        if all(pair):
            lines.append(
                f"{split.upper()} Acc@1 there: {RUN_LABELS.get(nac, nac)} {pair[0]['mean']:.2f}, "
                f"Perceiver IO {pair[1]['mean']:.2f}."
            )
    if problems:
        lines.append("**Stale**: " + "; ".join(problems) + ".")
    return " ".join(lines)


def _class_names(params: dict) -> list[str]:
    info = builder(params["data"], params["image"]["dataset"]).info()
    return list(info.get("class_names") or [str(i) for i in range(int(info["num_classes"]))])


def _anchor(title: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading: lower case, punctuation dropped,
    spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).strip().replace(" ", "-")


def _short(text: str, limit: int = 160) -> str:
    """The first sentence of ``text`` (a full stop after a word, before a capital), cut at a word
    before ``limit`` characters (with "…"): two lines of a list item at most."""
    first = re.split(r"(?<=[a-z0-9)][.])\s+(?=[A-Z])", text.strip(), maxsplit=1)[0]
    return first if len(first) <= limit else first[: first.rfind(" ", 0, limit)].rstrip(",;:") + " …"


def _write_readme(
    out: Path, params: dict, summary: dict, md: dict[str, str], figs: dict[str, list[Path]], root: Path
) -> None:
    """``out/README.md``: ``templates/README.md.j2`` rendered with the tables' Markdown, the figures'
    paths (relative to ``out``), the provenance and the few-shot and pruning summaries."""
    prune = [
        {
            "model": RUN_LABELS.get(k, k),
            "full Acc@1": round(v["full_acc1"], 2),
            "max fraction dropped within 3 points": v["max_fraction_within_3pts"],
            "speed-up there (95% CI over timed repeats)": f"{v['speedup_at_that_fraction']:.2f}"
            + (f" ± {v['speedup_ci95']:.2f}" if v["speedup_ci95"] is not None else ""),
        }
        for k, v in summary["prune"].items()
    ]
    text = TEMPLATES.get_template("README.md.j2").render(
        p=summary["provenance"],
        params=params,
        md=md,
        fig={k: v[0].relative_to(out).as_posix() for k, v in figs.items()},
        fs=summary["fewshot"],
        low=summary["fewshot"]["nac_minus_perceiver_io_shots_1_4"],
        prune_summary=pd.DataFrame(prune).to_markdown(index=False),
        FEWSHOT_CLAIM=FEWSHOT_CLAIM,
        image_classes=_image_classes(params),
        LRA=LRA_LEADERBOARD_TRANSFORMER,
        PAPER_THROUGHPUT=paper_throughput(),
        CONVERGENCE=CONVERGENCE,
    )
    (out / "README.md").write_text(text, encoding="utf-8")
    entries = [{"topic": t, "text": x, "short": _short(x), "anchor": _anchor(t)} for t, x in discrepancies()]
    for name in ("reference.md", "discrepancies.md"):
        page = TEMPLATES.get_template(f"{name}.j2").render(
            p=summary["provenance"], params=params, md=md, discrepancies=entries, cost=costs.cost_section(root)
        )
        (out / name).write_text(page, encoding="utf-8")


__all__ = ["build_report"]
