"""One prepared GPU window (issue 35): everything a short GPU loan should measure, in one
command that ends inside 9 minutes and writes one folder (docs/gpu.md, "One GPU window": the
parts, their shares, the output). ``bench/gpu_window.py`` is its command line:

    python bench/gpu_window.py --out "$OUT"          # or set $OUT and leave --out out
    python bench/gpu_window.py --plan                # what would run in the window, no GPU needed
    python bench/gpu_window.py --cpu-dry-run --out /tmp/window   # every part, tiny, on the CPU

The parts (``PARTS``) run in order, each in a process of its own with its own time share: skipped
(the JSON says why) when less than its ``need_s`` is left, stopped at its ``share_s`` with its
results so far kept. ``machine`` runs here; the measuring parts (``MEASURING``: the training step
eager, compiled and with CUDA graphs; Figure 5b's throughput) run this command as ``--child``
(``nac.bench.window_measure``); ``converged`` runs ``tools/run_converged.py --budget`` with what
is left. ``--cpu-dry-run`` runs every part at the ``smoke`` size on the CPU (``aot_eager`` for
both compiled modes, no sync counts or CUDA memory): it proves the parts run and write the
folder, not any number. Without CUDA, and without ``--cpu-dry-run`` or ``--plan``, it refuses
with one line and exit code 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from traceback import format_exc

from nac.repo import ROOT

BUDGET_S = 540.0  # the whole window: 9 minutes (the run tool allows 10 per command)
RESERVE_S = 15.0  # kept back from the parts: the JSON, the tar, the summary
GRACE_S = 20.0  # a part's own deadline (to fit its timing blocks) is its share less this
STOP_S = 12.0  # a part still running at its share less this is stopped (SIGINT, SIGTERM, SIGKILL: 12 s at most)
MAX_FILES = 8  # what the output folder may hold
JSON_NAME, LOG_NAME, CONVERGED_NAME = "gpu_window.json", "window.log", "converged.tar.gz"
CONVERGED_CMD = [sys.executable, "tools/run_converged.py"]
CONVERGED_KEEP = "results/converged"  # what the converged tool writes (its --out), tarred back
SCRIPT = ROOT / "bench" / "gpu_window.py"  # the command line; each measuring part runs it as --child


@dataclass(frozen=True)
class Part:
    name: str
    need_s: float  # the least time in which it gives a result: skipped when less is left
    share_s: float | None  # the most it may take (None: all that is left)
    what: str


# Shares on one H200 (issue 51's window; the eager steps of bench/results/gpu_window*.json, the
# regional compilation's first step unknown): each step part measures the Tiny-ImageNet pair, then the
# ImageNet pair with what is left of its share; the parts fit their blocks to what is left, so a slower
# compilation costs blocks, not the part.
PARTS = (
    Part("graphs_equal", 40, 60, "tests/test_cuda_graphs.py on the GPU: the captured step against the eager one"),
    Part("step_eager", 40, 60, "bf16 step at batch 128, eager, Tiny-ImageNet then ImageNet size"),
    Part("step_graphed", 40, 70, "the same, train.cuda_graphs: true (two eager steps, the capture, replays)"),
    Part("step_compiled", 60, 120, "the same, train.compile: default, compile_scope: regional (each layer)"),
    Part("mini_workers", 60, 145, "mini NAC pieces' steps/s per worker and in all, eager and graphed, 1 and 8 workers"),
    Part("throughput", 30, 60, "module dropping: whole model and executor, 0% and 87.5% dropped"),
    Part("converged", 105, None, "pieces of the converged run: tools/run_converged.py --budget <minutes>"),
)
DEFAULT_PARTS = ("graphs_equal", "step_eager", "step_graphed", "step_compiled", "mini_workers")  # issue 51's
STEP_FORMS = {"step_eager": "eager", "step_graphed": "graphed", "step_compiled": "compiled"}
MEASURING = (*STEP_FORMS, "throughput")  # the parts that run as ``--child``
WORKER_ROUNDS = ((False, 1), (True, 1), (False, 8), (True, 8))  # (graphed, workers) of mini_workers
WORKER_READY_S, WORKER_MEASURE_S = 25.0, 8.0  # a round: its workers start, build and warm up; then measure
CONVERGED_MARGIN_S = 45.0  # the converged tool's wrap-up after its budget (copying its results)


def decide(part: Part, left_s: float) -> tuple[float | None, str | None]:
    """``(seconds allowed, None)`` for ``part`` with ``left_s`` of the window left, or ``(None,
    why it is skipped)``."""
    if left_s < part.need_s:
        return None, f"skipped: needs at least {part.need_s:.0f} s, {max(left_s, 0):.0f} s of the window left"
    return (left_s if part.share_s is None else min(part.share_s, left_s)), None


def plan(parts=None, budget_s: float = BUDGET_S, reserve_s: float = RESERVE_S) -> list[dict]:
    """The window if every part took its whole share (the worst case; parts that end early leave
    more to those after them): per part its start, the seconds allowed, or why it is skipped. ``parts``:
    the default parts (``DEFAULT_PARTS``) when None."""
    parts = [p for p in PARTS if p.name in DEFAULT_PARTS] if parts is None else parts
    left, rows = budget_s - reserve_s, []
    for part in parts:
        allowed, why = decide(part, left)
        rows.append({"part": part.name, "start_s": budget_s - reserve_s - left, "allowed_s": allowed, "skipped": why})
        left -= allowed or 0.0
    return rows


def converged_minutes(allowed_s: float) -> int:
    """Whole minutes of ``--budget`` for the converged tool given ``allowed_s`` (its wrap-up,
    ``CONVERGED_MARGIN_S``, and the time to stop it, ``STOP_S``, kept out)."""
    return max(0, math.floor((allowed_s - CONVERGED_MARGIN_S - STOP_S) / 60))


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# the parts (each runs in a child process: ``--child NAME``)


def child(a: argparse.Namespace) -> None:
    """One measuring part (``--child NAME``): its results saved to ``--result`` as they come; an
    error is saved with them (and raised: the child exits non-zero)."""
    # deferred (and in `window`): the measuring module imports torch and the models, ~3.5 s that
    # `--plan` (74 ms without them) would pay for nothing
    from nac.bench.window_measure import measure_step, measure_throughput, mini_worker

    result, last = Path(a.result), {}

    def save(res):
        last["res"] = res
        _write_json(result, res)

    try:
        if a.child in STEP_FORMS:
            res = measure_step(STEP_FORMS[a.child], a.batch, a.blocks, a.steps, a.until, a.cpu_dry_run, save)
        elif a.child == "mini_worker":
            res = mini_worker(a.graphed, a.run, a.start_at, a.end_at, a.cpu_dry_run, save)
        elif a.child == "throughput":
            res = measure_throughput(a.eval_batch, a.blocks, a.until, a.cpu_dry_run, save)
        else:
            raise SystemExit(f"unknown part {a.child!r}; the measuring parts are {', '.join(MEASURING)}")
    except Exception as e:
        save({**last.get("res", {}), "error": f"{type(e).__name__}: {e}"[:2000], "traceback": format_exc()[-4000:]})
        raise
    save(res)


# ---------------------------------------------------------------------------------------------
# the window (the parent process)


class Window:
    """The deadline and the output folder of one window."""

    def __init__(self, out: Path, budget_s: float, reserve_s: float, log):
        self.out, self.log = out, log
        self.t0 = time.monotonic()
        self.deadline = self.t0 + budget_s - reserve_s

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def say(self, line: str) -> None:
        line = f"[{self.elapsed():6.1f} s] {line}"
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()


def _stop(proc: subprocess.Popen, first=signal.SIGINT) -> None:
    """Stop ``proc`` and its children (its own session): ``first`` (SIGINT: a training stage saves
    what it can), then SIGTERM, then SIGKILL: ``STOP_S`` at most."""
    for sig, wait in ((first, STOP_S / 2), (signal.SIGTERM, STOP_S / 4), (signal.SIGKILL, STOP_S / 4)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_bounded(cmd: list[str], timeout_s: float, log, cwd=ROOT) -> dict:
    """``cmd`` in a session of its own, output to ``log``, stopped at ``timeout_s``:
    ``{"rc", "wall_s", "stopped"}``."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    stopped = False
    try:
        proc.wait(timeout=max(timeout_s, 1))
    except subprocess.TimeoutExpired:
        stopped = True
        _stop(proc)
    except BaseException:  # Ctrl-C of the window: no part outlives it
        _stop(proc)
        raise
    return {"rc": proc.returncode, "wall_s": time.monotonic() - t0, "stopped": stopped}


def run_part(part: Part, allowed: float, a: argparse.Namespace, w: Window) -> dict:
    """A measuring part in a child process, its own deadline ``GRACE_S`` before ``allowed``, stopped
    ``STOP_S`` before it."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        cmd = [sys.executable, str(SCRIPT), "--child", part.name, "--result", str(result)]
        cmd += ["--until", str(time.time() + allowed - GRACE_S), "--batch", str(a.batch), "--blocks", str(a.blocks)]
        cmd += ["--steps", str(a.steps), "--eval-batch", *map(str, a.eval_batch)]
        cmd += ["--cpu-dry-run"] if a.cpu_dry_run else []
        w.log.write(f"--- {part.name}: {' '.join(cmd)}\n")
        w.log.flush()
        status = run_bounded(cmd, allowed - STOP_S, w.log)
        res = json.loads(result.read_text(encoding="utf-8")) if result.is_file() else {}
    if status["stopped"]:
        status["note"] = f"stopped at its share ({allowed:.0f} s); the results are what it had saved"
    elif status["rc"] != 0:
        status["note"] = f"exited with {status['rc']}: see {LOG_NAME}"
    return {**status, "results": res}


def run_graphs_equal(allowed: float, a: argparse.Namespace, w: Window) -> dict:
    """``pytest tests/test_cuda_graphs.py`` (its CUDA tests: the captured step against the eager one;
    on the CPU dry run its CPU tests), output to the log; ``{"rc", "passed", "tail"}``."""
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "pytest.log"
        cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/test_cuda_graphs.py"]
        with log_path.open("w", encoding="utf-8") as log:
            status = run_bounded(cmd, allowed - STOP_S, log)
        text = log_path.read_text(encoding="utf-8", errors="replace")
    w.log.write(f"--- graphs_equal: {' '.join(cmd)}\n{text}\n")
    w.log.flush()
    last = [line for line in text.splitlines() if line.strip()][-1:] or [""]
    return {**status, "command": " ".join(cmd[1:]), "summary": last[0], "tail": text[-3000:]}


def run_mini_workers(allowed: float, a: argparse.Namespace, w: Window) -> dict:
    """``WORKER_ROUNDS``: per round its workers (processes of ``--child mini_worker``, each one the
    mini NAC at mini's batch on the GPU, eager or graphed) start together, build and warm up for up
    to ``WORKER_READY_S``, then step for ``WORKER_MEASURE_S``: steps/s per worker and in all."""
    rounds, end = [], time.monotonic() + allowed - STOP_S
    ready_s, measure_s = (40.0, 3.0) if a.cpu_dry_run else (WORKER_READY_S, WORKER_MEASURE_S)
    chosen = WORKER_ROUNDS if not a.cpu_dry_run else ((False, 1), (True, 2))
    if a.worker_rounds:  # FORM:WORKERS, e.g. graphed:8
        chosen = [(r.split(":")[0] == "graphed", int(r.split(":")[1])) for r in a.worker_rounds]
    for graphed, n in chosen:
        if time.monotonic() + ready_s + measure_s + 10 > end:
            rounds.append({"graphed": graphed, "workers": n, "skipped": "the part's share ran out"})
            continue
        start_at = time.time() + ready_s
        with tempfile.TemporaryDirectory() as tmp:
            procs = []
            for i in range(n):
                cmd = [sys.executable, str(SCRIPT), "--child", "mini_worker", "--result", f"{tmp}/{i}.json"]
                cmd += ["--graphed", str(int(graphed)), "--run", "nac-scale_free"]
                cmd += ["--start-at", str(start_at), "--end-at", str(start_at + measure_s)]
                cmd += ["--cpu-dry-run"] if a.cpu_dry_run else []
                env = dict(os.environ, OMP_NUM_THREADS="1")
                procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=w.log, stderr=subprocess.STDOUT, env=env))
            for proc in procs:
                try:
                    proc.wait(timeout=max(1.0, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
            got = []
            for i in range(n):
                f = Path(tmp) / f"{i}.json"
                got.append(json.loads(f.read_text(encoding="utf-8")) if f.is_file() else {"error": "no result"})
        rates = [g["steps_per_s"] for g in got if "steps_per_s" in g]
        rounds.append(
            {
                "graphed": graphed,
                "workers": n,
                "per_worker": got,
                "steps_per_s_per_worker": rates,
                "steps_per_s_in_all": sum(rates) if len(rates) == n else None,
                "late": sum(1 for g in got if g.get("ready_late")),
            }
        )
        w.say(f"mini_workers: graphed={graphed} workers={n}: {[round(r, 1) for r in rates]} steps/s")
    return {"rc": 0, "rounds": rounds, "run": "nac-scale_free (mini profile)", "mps": False}


def run_converged(allowed: float, a: argparse.Namespace, w: Window) -> dict:
    """``tools/run_converged.py --budget <minutes>`` (``a.converged_cmd``) for what ``allowed``
    holds; its log and ``a.converged_keep`` tarred to ``converged.tar.gz``."""
    cmd = a.converged_cmd or CONVERGED_CMD
    try:
        helped = subprocess.run([*cmd, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        help_text = helped.stdout + helped.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        help_text = f"{type(e).__name__}: {e}"
    if "--budget" not in help_text:
        return {
            "ran": False,
            "reason": f"`{' '.join(cmd)} --help` names no --budget option: the piece-wise converged command is "
            "not installed here (issue 34), and an unbounded converged run would outlive the window",
            "help_tail": help_text[-600:],
        }
    allowed = min(allowed, w.left())  # less the --help call's time
    minutes = converged_minutes(allowed)
    if minutes < 1:
        return {"ran": False, "reason": f"{allowed:.0f} s left: not a whole minute of --budget after its wrap-up"}
    full = [*cmd, "--budget", str(minutes), *shlex.split(a.converged_args)]
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "converged.log"
        with log_path.open("w", encoding="utf-8") as log:
            status = run_bounded(full, allowed - STOP_S, log)
        keep = ROOT / a.converged_keep  # an absolute path stays itself
        with tarfile.open(w.out / CONVERGED_NAME, "w:gz") as tar:
            tar.add(log_path, arcname="converged.log")
            if keep.exists():
                tar.add(keep, arcname=keep.name if Path(a.converged_keep).is_absolute() else a.converged_keep)
        tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
    return {"ran": True, "command": " ".join(full), "budget_min": minutes, **status, "log_tail": tail}


def summary_line(name: str, rec: dict) -> str:
    if rec.get("skipped"):
        return f"{name}: {rec['skipped']}"
    r = rec.get("results", rec)
    bits = [f"{name}: {rec.get('wall_s', 0):.0f} s of {rec.get('allowed_s', 0):.0f}"]
    if rec.get("note"):
        bits.append(rec["note"])
    if r.get("error"):
        bits.append(f"error: {r['error'][:300]}")
    for size, out in (r.get("sizes") or {}).items():
        if "nac_over_pio" in out:
            iv = out["nac_over_pio"]
            ci = f" [{iv['lo']:.2f}, {iv['hi']:.2f}]" if iv["lo"] is not None else ""
            ms = ", ".join(f"{k} {v['mean'] * 1e3:.1f} ms" for k, v in out["s_per_step"].items())
            bits.append(f"{size}: {ms}; NAC/PIO {iv['mean']:.2f}{ci}")
        for k, m in out.get("models", {}).items():
            first = ", ".join(f"{t:.1f}" for t in m["first_steps_s"])
            bits.append(f"{size} {k}: first steps {first} s, syncs/step {m.get('syncs_per_step')}")
        if out.get("skipped"):
            bits.append(f"{size}: {out['skipped']}")
    if name == "graphs_equal":
        bits.append(f"rc {rec.get('rc')}: {rec.get('summary')}")
    if name == "converged":
        bits.append(r.get("reason") or f"--budget {r.get('budget_min')} rc {r.get('rc')}")
    return "; ".join(bits)


def window(a: argparse.Namespace) -> int:
    from nac.bench.window_measure import DRY_PARAMS, machine, provenance  # deferred: as in `child`

    out = Path(a.out)
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"gpu_window.py: --out {out} is not empty; give an empty or new folder")
    out.mkdir(parents=True, exist_ok=True)
    chosen = [p for p in PARTS if p.name in (a.parts or DEFAULT_PARTS)]
    res = {"issue": 51, "start": _now(), "budget_s": a.budget_s, "reserve_s": a.reserve_s, "parts": {}}
    with (out / LOG_NAME).open("w", encoding="utf-8") as log:
        w = Window(out, a.budget_s, a.reserve_s, log)
        res["machine"] = machine(out, a.cpu_dry_run)
        res["provenance"] = provenance(DRY_PARAMS if a.cpu_dry_run else ["profile=paper"])
        w.say(f"machine: {res['machine']['gpu'] or 'CPU (dry run)'}, torch {res['machine']['torch']}")
        _write_json(out / JSON_NAME, res)
        for part in chosen:
            allowed, why = decide(part, w.left())
            if allowed is None:
                rec = {"what": part.what, "skipped": why}
            else:
                w.say(f"{part.name}: {allowed:.0f} s allowed")
                t0 = time.monotonic()
                special = {"converged": run_converged, "graphs_equal": run_graphs_equal}
                special["mini_workers"] = run_mini_workers
                if part.name in special:
                    rec = special[part.name](allowed, a, w)
                else:
                    rec = run_part(part, allowed, a, w)
                rec = {"what": part.what, "allowed_s": allowed, **rec, "wall_s": time.monotonic() - t0}
            res["parts"][part.name] = rec
            w.say(summary_line(part.name, rec))
            _write_json(out / JSON_NAME, res)
        res["end"], res["wall_s"] = _now(), w.elapsed()
        w.say(f"window done in {res['wall_s']:.0f} s; results in {out}")
    _write_json(out / JSON_NAME, res)
    files = sorted(p.name for p in out.iterdir())
    if len(files) > MAX_FILES:
        raise SystemExit(f"gpu_window.py wrote {len(files)} files to {out}, more than {MAX_FILES}: {files}")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT"), help="the output folder (default: $OUT)")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S, help="the whole window in seconds (default 540)")
    ap.add_argument("--reserve-s", type=float, default=RESERVE_S, help="kept back for writing the results")
    ap.add_argument(
        "--parts",
        nargs="+",
        choices=[p.name for p in PARTS],
        help="the parts to run, in PARTS order (default: issue 51's)",
    )
    ap.add_argument("--plan", action="store_true", help="print what would run in --budget-s and exit")
    ap.add_argument("--cpu-dry-run", action="store_true", help="every part, tiny, on the CPU (no numbers)")
    ap.add_argument("--batch", type=int, help="training batch (default 128; dry run 4)")
    ap.add_argument("--blocks", type=int, help="interleaved timing blocks (default 5; dry run 2)")
    ap.add_argument("--steps", type=int, help="steps per block (default 10; dry run 1)")
    ap.add_argument("--eval-batch", type=int, nargs="+", help="throughput batches (default 1024 256; dry run 4)")
    ap.add_argument("--converged-cmd", nargs="+", help=argparse.SUPPRESS)  # tests: a stand-in command
    ap.add_argument(
        "--converged-args",
        default="",
        help="more arguments for the converged tool, one string: --converged-args='...'",
    )
    ap.add_argument("--converged-keep", default=CONVERGED_KEEP, help="the converged tool's output, tarred back")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--until", type=float, help=argparse.SUPPRESS)
    ap.add_argument(
        "--worker-rounds",
        nargs="+",
        metavar="FORM:WORKERS",
        help="mini_workers' rounds instead of its default four, e.g. graphed:8 eager:4 (FORM: eager | graphed)",
    )
    ap.add_argument("--graphed", type=int, default=0, help=argparse.SUPPRESS)  # mini_worker
    ap.add_argument("--run", default="nac-scale_free", help=argparse.SUPPRESS)
    ap.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--end-at", type=float, help=argparse.SUPPRESS)
    return ap


def parse(argv=None) -> argparse.Namespace:
    ap = parser()
    a = ap.parse_args(argv)
    defaults = {"batch": (128, 4), "blocks": (5, 2), "steps": (10, 1), "eval_batch": ([1024, 256], [4])}
    for k, (gpu, dry) in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, dry if a.cpu_dry_run else gpu)
    for k in ("batch", "blocks", "steps"):
        if getattr(a, k) < 1:
            ap.error(f"--{k} must be at least 1, got {getattr(a, k)}")
    if a.budget_s <= a.reserve_s:
        ap.error(f"--budget-s ({a.budget_s:g}) must exceed --reserve-s ({a.reserve_s:g})")
    if a.child is None and not a.plan and not a.out:
        ap.error("give --out DIR (or set $OUT): the folder the window writes")
    return a


def main(argv=None) -> int:
    a = parse(argv)
    if a.plan:
        chosen = [p for p in PARTS if p.name in (a.parts or DEFAULT_PARTS)]
        for row in plan(chosen, a.budget_s, a.reserve_s):
            state = row["skipped"] or f"up to {row['allowed_s']:.0f} s"
            print(f"{row['part']:16s} from {row['start_s']:5.0f} s: {state}")
        return 0
    if a.child:
        child(a)
        return 0
    import torch  # deferred: ~1.2 s that `--plan` needs none of

    if not a.cpu_dry_run and not torch.cuda.is_available():
        raise SystemExit(
            "gpu_window.py needs a CUDA device and none is visible: run it on a GPU machine "
            "(run tool: bash -c 'python bench/gpu_window.py --out $OUT', timeout_s 570), or add --cpu-dry-run"
        )
    try:
        import hydra  # noqa: F401  (compose: the paper profile's params; deferred: a probe, absent on the GPU image)
    except ImportError:
        raise SystemExit(
            "gpu_window.py needs hydra-core, omegaconf and antlr4-python3-runtime, missing here: carry them as "
            "wheels (docs/gpu.md, 'One GPU window')"
        ) from None
    return window(a)


if __name__ == "__main__":
    sys.exit(main())
