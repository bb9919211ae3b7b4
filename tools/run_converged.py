"""Run the `converged` profile and keep its results, apart from mini's, in results/converged/.

    python tools/run_converged.py [--profile converged] [--workdir build/converged] [--out results/converged]
                                  [override ...]

1. Copies the checkout's tracked files (``git ls-files``: the code as it is now, committed or not;
   provenance.json says which) into ``--workdir``, a DVC project of its own (``core.no_scm``), so
   the repository's params.yaml, models/, metrics/ and dvc.lock are never touched.
2. Composes ``profile=<profile>`` (and any Hydra overrides) into the copy's params.yaml and runs
   ``dvc repro`` there. The environment passes through: ``NAC_WORKERS``, ``NAC_JOBS_PER_GPU``,
   ``NAC_DEVICES``, ``NAC_EXECUTOR`` spread the jobs (docs/scale-out.md).
3. Copies the small results into ``--out``: ``metrics/`` (without dvclive's per-run logs),
   ``dvc.lock``, ``params.yaml`` and ``provenance.json`` (profile, overrides, commit, params hash,
   code fingerprint, machine, device, start and end time; ``nac.provenance``).

Resumable: the work folder is kept, so after an interruption the same command resumes (the
training stages resume from their checkpoints; finished stages are not rerun by DVC). The start
time kept is the first attempt's. ``tests/test_converged.py`` checks the committed results'
provenance against the committed code and params.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nac.provenance import PROVENANCE, code_fingerprint, git_commit, params_hash  # noqa: E402

OUTPUTS = ("metrics", "reports", "results")  # committed outputs not copied into the work folder
STARTED = ".converged-started"  # in the work folder: the first attempt's start time


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def copy_checkout(src: Path, dst: Path) -> None:
    """The tracked files of ``src`` (their working-tree state) into ``dst``, except the committed
    outputs (``OUTPUTS``, ``dvc.lock``: mini's); what the run made in ``dst`` (data/, models/,
    metrics/, dvc.lock, .dvc/cache) is kept, so a rerun resumes."""
    files = (
        subprocess.run(["git", "ls-files", "-z"], cwd=src, capture_output=True, check=True).stdout.decode().split("\0")
    )
    for rel in filter(None, files):
        if rel == "dvc.lock" or rel.split("/")[0] in OUTPUTS and rel != "results/converged/README.md":
            continue  # mini's committed outputs: the run makes its own (results/: only its layout note)
        s, d = src / rel, dst / rel
        if s.is_file():
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, d)


def device() -> str:
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name()}"
    return f"CPU ({platform.machine()}, {os.cpu_count()} cores)"


def learned_graphs(work: Path, params: dict) -> dict[str, list]:
    """Figure 3's link probabilities of each prior's NAC, first seed (the checkpoints stay in the
    work folder; these few numbers travel with the results)."""
    from nac.checkpoint_io import load_model
    from nac.pipeline.paths import image_checkpoint, parse_run

    out = {}
    for run in params["image"]["ladder"]:
        variant, prior, control = parse_run(run)
        ckpt = work / image_checkpoint(run, params["seeds"][0])
        if variant == "nac" and control is None and ckpt.exists():
            p = load_model(ckpt).link_probabilities().detach()
            out[prior] = [[round(float(x), 6) for x in row] for row in p]
    return out


def collect(out: Path, work: Path, profile: str, overrides: list[str], start: str, end: str) -> dict:
    """Copy the run's small results from ``work`` into ``out`` and write its provenance.json."""
    import yaml

    shutil.rmtree(out / "metrics", ignore_errors=True)  # the previous run's (README.md, the layout, stays)
    for name in (PROVENANCE, "graphs.json"):
        (out / name).unlink(missing_ok=True)
    (out / "metrics").mkdir(parents=True)
    for p in (work / "metrics").rglob("*"):
        rel = p.relative_to(work / "metrics")
        if p.is_file() and "live" not in rel.parts:  # dvclive's logs: the histories are in the metrics
            (out / "metrics" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, out / "metrics" / rel)
    for name in ("dvc.lock", "params.yaml"):
        shutil.copy2(work / name, out / name)
    params = yaml.safe_load((work / "params.yaml").read_text())
    graphs = learned_graphs(work, params)
    if graphs:
        (out / "graphs.json").write_text(json.dumps(graphs) + "\n")
    prov = {
        "profile": profile,
        "overrides": overrides,
        **git_commit(ROOT),
        "params_sha256": params_hash(params),
        "code": code_fingerprint(work),
        "machine": f"{platform.node() or 'unknown host'} ({platform.platform()})",
        "device": device(),
        "workers": {k: v for k, v in os.environ.items() if k.startswith("NAC_")},
        "start": start,
        "end": end,
        "command": " ".join(["python tools/run_converged.py", *sys.argv[1:]]),
    }
    (out / PROVENANCE).write_text(json.dumps(prov, indent=2) + "\n")
    return prov


def prepare_workdir(work: Path, profile: str, overrides: list[str]):
    """``work``: the checkout copied in (``copy_checkout``), a DVC project of its own
    (``core.no_scm``), ``profile`` and ``overrides`` composed into its params.yaml. Returns
    ``run(*cmd)``: a command run there with this copy's ``nac`` on PYTHONPATH, failing loudly."""
    work.mkdir(parents=True, exist_ok=True)
    copy_checkout(ROOT, work)
    env = {**os.environ, "PYTHONPATH": str(work)}

    def run(*cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, cwd=work, env=env, check=True)

    if not (work / ".dvc" / "config.local").exists():
        run("dvc", "config", "--local", "core.no_scm", "true")
    run(sys.executable, "-m", "nac.compose", f"profile={profile}", *overrides)
    return run


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="converged")
    ap.add_argument("--workdir", default=str(ROOT / "build" / "converged"))
    ap.add_argument("--out", default=str(ROOT / "results" / "converged"))
    ap.add_argument("overrides", nargs="*", help="Hydra overrides on top of the profile (image.train.epochs=2)")
    args = ap.parse_args(argv)
    work, out = Path(args.workdir).resolve(), Path(args.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = work / STARTED
    if not started.exists():
        started.write_text(_now())
    run = prepare_workdir(work, args.profile, args.overrides)
    run("dvc", "repro")
    prov = collect(out, work, args.profile, list(args.overrides), started.read_text().strip(), _now())
    started.unlink()
    print(f"wrote {out} ({prov['profile']}, {prov['start']} to {prov['end']}, {prov['device']})")


if __name__ == "__main__":
    main()
