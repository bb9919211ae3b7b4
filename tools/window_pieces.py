"""Converged pieces in one short device loan: the GPU and the machine's CPU cores at once.

    python tools/window_pieces.py --out "$OUT" --budget 7.5 \\
        --gpu-workers 6 --gpu-only 'image/*' --cpu-workers 9 --cpu-only 'points/*' 'text/*' \\
        --commit <sha of the checkout that travelled>

A GPU machine is lent now and then for a few minutes (docs/gpu.md). Mini-sized models leave most
of such a machine idle: a step is bound by the host, so one process per GPU uses one of its cores.
This command runs two ``tools/run_converged.py`` commands side by side, each with its own piece
patterns, work folder and the same budget: the *GPU side* (``NAC_JOBS_PER_GPU`` workers sharing
the GPU, one intra-op thread each) and the *CPU side* (``CUDA_VISIBLE_DEVICES`` empty, so the
params' ``device: auto`` is the CPU; ``NAC_WORKERS`` one-thread workers). The two sides must not
share a piece (refused). Each written piece records its device kind, so the converged report says
where a pair compared by seed ran on different kinds (docs/convergence.md).

Everything comes back through ``--out`` (the device tool's ``$OUT``: at most 8 files), refreshed
every ``--every`` seconds so that a command stopped at its limit still returns what was written:
``pieces.tar.gz`` (the pieces the two sides wrote, under ``results/converged/pieces/<profile>/``),
``window.json`` (the machine, the sides, their commands, start and end, the pieces each wrote),
``gpu.log``/``cpu.log`` (each side's output, the last ``--log-bytes``), ``nvidia-smi.txt``. With
``--keep-unfinished``, ``unfinished.tar.gz`` holds the per-epoch checkpoints of the CPU side's
pieces still running at the end of the budget (the same command on another CPU resumes them,
its record saying ``resumed_from_checkpoint``); the GPU side's are not kept (a piece finished on
another kind of device would mix two).

Where the travelling copy has no ``.git``, ``--commit`` names the commit it is (``NAC_SOURCE_COMMIT``
in the pieces' records; on 2026-11-27 the device tool's copy had a ``.git`` at the last pushed commit,
which the records name); the fingerprint of each piece is computed from the files themselves either
way. ``--test`` runs both sides on the CPU (for the tests: the GPU
side then has no GPU and says so in ``window.json``).
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
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nac.converged import pieces as P  # noqa: E402

PIECES = ROOT / P.PIECES
TOOL = [sys.executable, str(ROOT / "tools" / "run_converged.py")]


def utc() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"{cmd[0]}: {e}"


def machine() -> dict:
    import torch

    gpu = torch.cuda.is_available()
    return {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if gpu else None,
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }


def ids_of(profile: str, patterns: list[str]) -> set[str]:
    """The piece ids a side's patterns select (the run tool's own selection)."""
    from nac.pipeline.params import compose

    params = compose([f"profile={profile}"], conf_dir=ROOT / "conf")
    return {p.id for p in P.select(P.plan(params), patterns)}


def written(pieces: Path, profile: str) -> set[str]:
    base = pieces / profile
    return {f"{d.parent.name}/{d.name}" for d in base.glob("*/*") if (d / P.RECORD).is_file()}


def tar_into(out: Path, name: str, paths: list[tuple[Path, str]]) -> None:
    """``out/name`` (a gzip tar of ``paths``: (path, name in the archive)), replaced atomically."""
    tmp = out / f".{name}.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for p, arc in paths:
            if p.exists():
                tar.add(p, arcname=arc)
    os.replace(tmp, out / name)


def tail_copy(src: Path, dest: Path, limit: int) -> None:
    if not src.exists():
        return
    size = src.stat().st_size
    with open(src, "rb") as f:
        if size > limit:
            f.seek(size - limit)
        data = f.read()
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dest)


def mps_env(folder: Path) -> dict:
    return dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(folder / "pipe"), CUDA_MPS_LOG_DIRECTORY=str(folder / "log"))


def start_mps(folder: Path) -> dict:
    """Start the CUDA MPS control daemon (its pipe and log folders under ``folder``; the GPU side's
    workers inherit ``CUDA_MPS_PIPE_DIRECTORY``). Returns what happened, for window.json."""
    exe = shutil.which("nvidia-cuda-mps-control")
    if exe is None:
        return {"started": False, "why": "nvidia-cuda-mps-control is not on the PATH"}
    for sub in ("pipe", "log"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    env = mps_env(folder)
    got = subprocess.run([exe, "-d"], env=env, capture_output=True, text=True)
    if got.returncode != 0:
        return {"started": False, "why": f"nvidia-cuda-mps-control -d exited {got.returncode}: {got.stderr.strip()}"}
    probe = mps_probe(env)
    if probe is not None:  # the daemon runs but a client cannot use the GPU through it: go on without
        subprocess.run([exe], input="quit\n", text=True, env=env, capture_output=True)
        return {"started": False, "why": f"a CUDA client failed under MPS, so the window ran without it: {probe}"}
    os.environ.update(
        CUDA_MPS_PIPE_DIRECTORY=env["CUDA_MPS_PIPE_DIRECTORY"], CUDA_MPS_LOG_DIRECTORY=env["CUDA_MPS_LOG_DIRECTORY"]
    )
    return {"started": True, "pipe": env["CUDA_MPS_PIPE_DIRECTORY"]}


MPS_PROBE = (
    "import torch; x = torch.ones(256, 256, device='cuda'); torch.cuda.synchronize(); "
    "assert float((x @ x)[0, 0]) == 256.0; print('ok')"
)


def mps_probe(env: dict, timeout: float = 90.0) -> str | None:
    """None when a CUDA client computes through the MPS daemon, else why not (one line)."""
    try:
        got = subprocess.run(
            [sys.executable, "-c", MPS_PROBE], env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return f"the probe did not end in {timeout:g} s"
    if got.returncode == 0 and got.stdout.strip().endswith("ok"):
        return None
    lines = (got.stderr or got.stdout).strip().splitlines()
    return f"exit {got.returncode}: {lines[-1] if lines else 'no output'}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT"), help="folder brought back (default $OUT)")
    ap.add_argument("--profile", default="converged")
    ap.add_argument("--budget", type=float, required=True, help="minutes for each side's run_converged")
    ap.add_argument("--gpu-workers", type=int, default=0, help="NAC_JOBS_PER_GPU of the GPU side (0: no GPU side)")
    ap.add_argument("--gpu-only", nargs="+", default=["image/*"], metavar="PATTERN")
    ap.add_argument("--cpu-workers", type=int, default=0, help="NAC_WORKERS of the CPU side (0: no CPU side)")
    ap.add_argument("--cpu-only", nargs="+", default=["points/*", "text/*"], metavar="PATTERN")
    ap.add_argument("--commit", help="the commit the travelling copy is (recorded where git is missing)")
    ap.add_argument("--every", type=float, default=30.0, help="seconds between refreshes of --out")
    ap.add_argument("--log-bytes", type=int, default=4_000_000)
    ap.add_argument("--keep-unfinished", action="store_true", help="bring back the CPU side's unfinished checkpoints")
    ap.add_argument("--workdir", default="/tmp/window_pieces", help="data/ and models/ of each side")
    ap.add_argument("--pieces", default=str(PIECES), help="where pieces are written")
    ap.add_argument(
        "--mps",
        action="store_true",
        help="start CUDA MPS for the GPU side (kernels of its workers may then overlap; recorded in window.json)",
    )
    ap.add_argument(
        "--pattern-order",
        action="store_true",
        help="each side starts its pieces in the order of its patterns (run_converged --pattern-order)",
    )
    ap.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="the GPU side's pieces train with train.cuda_graphs: true where their model allows (run_converged "
        "--cuda-graphs); each piece's record says whether it did",
    )
    ap.add_argument("--test", action="store_true", help="both sides on the CPU (tests)")
    a = ap.parse_args(argv)
    if not a.out:
        ap.error("--out (or $OUT) is required")
    if a.gpu_workers < 0 or a.cpu_workers < 0 or a.gpu_workers + a.cpu_workers == 0:
        ap.error("give --gpu-workers and/or --cpu-workers (>= 0, not both 0)")
    gpu_ids = ids_of(a.profile, a.gpu_only) if a.gpu_workers else set()
    cpu_ids = ids_of(a.profile, a.cpu_only) if a.cpu_workers else set()
    if both := sorted(gpu_ids & cpu_ids):
        ap.error(f"--gpu-only and --cpu-only share {len(both)} piece(s), e.g. {both[0]}: give each side its own")
    mach = machine()
    if a.gpu_workers and not mach["gpu"] and not a.test:
        print("no CUDA device here: the GPU side cannot run (--test runs both sides on the CPU)", file=sys.stderr)
        return 1

    out, work = Path(a.out), Path(a.workdir)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    (out / "nvidia-smi.txt").write_text(sh(["nvidia-smi"]) if shutil.which("nvidia-smi") else "no nvidia-smi\n")
    pieces = Path(a.pieces).resolve()
    before = written(pieces, a.profile)
    mps = start_mps(work / "mps") if a.mps and a.gpu_workers else None
    base_env = dict(os.environ, TQDM_MININTERVAL="20", PYTHONUNBUFFERED="1")
    if a.commit:
        base_env["NAC_SOURCE_COMMIT"] = a.commit
    sides = {}
    for name, n, pats in (("gpu", a.gpu_workers, a.gpu_only), ("cpu", a.cpu_workers, a.cpu_only)):
        if not n:
            continue
        env = dict(base_env, NAC_THREADS="1")
        if name == "gpu":
            env["NAC_JOBS_PER_GPU"] = str(n)
        if name == "cpu" or a.test:
            env["CUDA_VISIBLE_DEVICES"], env["NAC_WORKERS"] = "", str(n)
        cmd = [*TOOL, "--profile", a.profile, "--budget", f"{a.budget:g}", "--workdir", str(work / name)]
        cmd += ["--pieces", str(pieces)]
        cmd += ["--only", *pats] + (["--pattern-order"] if a.pattern_order else [])
        cmd += ["--cuda-graphs"] if name == "gpu" and a.cuda_graphs else []
        log = work / f"{name}.log"
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
        sides[name] = {"workers": n, "only": pats, "command": " ".join(cmd[1:]), "proc": proc, "log": log}
        print(f"{name} side: {n} worker(s), {' '.join(pats)}", flush=True)
    start = utc()

    def refresh(final: bool = False) -> dict:
        now = written(pieces, a.profile) - before
        base = f"results/converged/pieces/{a.profile}"  # this window's pieces only: the others are committed
        tar_into(out, "pieces.tar.gz", [(pieces / a.profile / i, f"{base}/{i}") for i in sorted(now)])
        for name, s in sides.items():
            tail_copy(s["log"], out / f"{name}.log", a.log_bytes)
        rec = {
            "machine": mach,
            "profile": a.profile,
            "budget_min": a.budget,
            "commit": a.commit,
            "mps": mps,
            "start": start,
            "end": utc() if final else None,
            "sides": {
                name: {
                    "workers": s["workers"],
                    "only": s["only"],
                    "command": s["command"],
                    "exit": s["proc"].poll(),
                    "wrote": sorted(now & (gpu_ids if name == "gpu" else cpu_ids)),
                }
                for name, s in sides.items()
            },
        }
        (out / ".window.json.tmp").write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")
        os.replace(out / ".window.json.tmp", out / "window.json")
        return rec

    while any(s["proc"].poll() is None for s in sides.values()):
        time.sleep(min(a.every, 5.0) if a.test else a.every)
        refresh()
    if mps and mps.get("started"):
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env=mps_env(work / "mps"))
    rec = refresh(final=True)
    if a.keep_unfinished and "cpu" in sides:
        models = work / "cpu" / a.profile / "models"
        tar_into(out, "unfinished.tar.gz", [(models, "models")])
    for name, side in rec["sides"].items():
        print(f"{name} side: exit {side['exit']}, wrote {len(side['wrote'])} piece(s)", flush=True)
    return 0 if all(s["exit"] == 0 for s in rec["sides"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
