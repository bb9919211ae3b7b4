"""Advance the `converged` profile piece by piece, within a time budget, keeping each finished piece.

    python tools/run_converged.py --budget MINUTES [--workers N] [--only PATTERN ...] [--rerun-stale]
                                  [--profile converged] [--keep-checkpoints]
    python tools/run_converged.py --list [--only PATTERN ...]

A piece is one model and seed of one track with everything measured on it (``nac.converged.pieces``;
docs/convergence.md, "Running it in pieces"). The command runs the pieces still missing in a fixed
priority order (the headline pair ``nac-<prior>`` / ``perceiver_io`` and the NAC's controls seed by
seed, then the rest of the image ladder, then points, ListOps, text, NLVR), each written atomically
to ``results/converged/pieces/<profile>/<track>/<run>-<seed>/`` (metrics JSON and its
``piece.json``: commit, fingerprint of its code and params, device, wall time, start and end).

Budget: a piece whose predicted time (the median wall time of written pieces of the same track and
run on the same kind of device) does not fit what is left is not started, nor is any piece after
it; a piece with no prediction yet starts, and at the end of the budget whatever still runs is
stopped (its per-epoch checkpoint intact in the work folder, so the same command resumes it).

Written pieces are never recomputed. ``--list`` says which are done, missing, or stale (their
code, i.e. the ``nac`` modules their track's job functions import, or their params changed); stale
pieces are rerun only with ``--rerun-stale``. ``--prove-equal COMMIT`` shows that a refactor since
``COMMIT`` computes the same pieces and records it, so that they stay done (``nac.converged.equal``).
Workers: ``--workers N`` (``NAC_WORKERS``), and on a GPU ``NAC_JOBS_PER_GPU`` / ``NAC_DEVICES``;
``NAC_EXECUTOR=slurm`` submits each piece through submitit (docs/scale-out.md). Checkpoints and
data live in ``--workdir``/<profile> (git-ignored; its ``data/`` and ``models/``, and submitit's
``.submitit/``), handed to each piece as paths (``nac.converged.jobs.in_work``): the working
directory is never changed. A piece's checkpoint is deleted once the piece is written
(``--keep-checkpoints`` keeps it).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import sys
import uuid
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nac.converged import jobs as piece_jobs  # noqa: E402
from nac.converged import pieces as P  # noqa: E402


class Terminated(KeyboardInterrupt):
    """SIGTERM: stop as Ctrl-C does (each piece's checkpoint is kept), with one line that says so."""


TERMINATED = [False]  # SIGTERM arrived (a training turns the interruption into its own SystemExit)


def on_sigterm(signum, frame):
    TERMINATED[0] = True
    raise Terminated("SIGTERM")


class BudgetOver(KeyboardInterrupt):
    """The budget ended while pieces were running."""


def source_commit() -> dict:
    """The checkout's commit when the command starts (``nac.converged.jobs.source_commit``: where git
    cannot say, ``NAC_SOURCE_COMMIT``, else "unknown"); each piece records its own, read when its
    computation starts."""
    return piece_jobs.source_commit({"code_root": str(ROOT)})


def load(profile: str, conf: Path = ROOT / "conf") -> dict:
    from nac.compose import validate_all
    from nac.pipeline.params import compose

    params = compose([f"profile={profile}"], conf_dir=conf)
    validate_all(params)
    return params


def predictions(root: Path, params: dict, device_kind: str) -> dict[str, float]:
    """{piece id: seconds}: the median wall time of the written pieces of the same track and run on
    the same kind of device (any seed; stale ones too: their cost is still a measurement)."""
    walls: dict[tuple[str, str], list[float]] = {}
    for p, st, rec, _ in P.status(root, params["profile"], params, ROOT):
        if rec is not None and rec.get("device_kind") == device_kind and "wall_s" in rec:
            walls.setdefault((p.track, p.run), []).append(float(rec["wall_s"]))
    return {p.id: statistics.median(walls[(p.track, p.run)]) for p in P.plan(params) if (p.track, p.run) in walls}


MIN_BUDGET = 0.1  # minutes: less cannot even prepare the data


def unwritable(root: Path) -> str | None:
    """Why pieces cannot be written under ``root`` (read-only, full, not a folder), or None."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"x" * 4096)
        probe.unlink()
    except OSError as e:
        return e.strerror or type(e).__name__
    return None


def list_pieces(rows, params: dict, device_kind: str, root: Path) -> str:
    pred = predictions(root, params, device_kind)
    lines = [f"{'piece':40s} {'status':8s} {'device':28s} {'minutes':>8s}  note"]
    for p, st, rec, why in rows:
        dev = (rec or {}).get("device_kind", "")
        mins = f"{rec['wall_s'] / 60:.1f}" if rec and "wall_s" in rec else ""
        note = (
            f"its {why} changed (--rerun-stale reruns it)"
            if st == "stale"
            else f"damaged: {why} (--rerun-damaged reruns it)"
            if st == "damaged"
            else why
        )
        if st == "missing" and p.id in pred:
            note = f"predicted {pred[p.id] / 60:.1f} min on {device_kind}"
        lines.append(f"{p.id:40s} {st:8s} {dev:28s} {mins:>8s}  {note}".rstrip())
    counts = {s: sum(1 for r in rows if r[1] == s) for s in P.STATUSES}
    todo = [p for p, st, _, _ in rows if st != "done"]
    known = [pred[p.id] for p in todo if p.id in pred]
    lines.append(
        f"{len(rows)} pieces of profile {params['profile']}: "
        + ", ".join(f"{n} {s}" for s, n in counts.items())
        + (
            f"; the {len(known)} of the {len(todo)} left with a prediction: {sum(known) / 60:.0f} min on {device_kind}"
            if todo
            else ""
        )
    )
    return "\n".join(lines)


def prepare_data(params: dict, todo: list[P.Piece]) -> None:
    """The datasets the pieces read, generated (embedded) or prepared under ``data.root`` (the run
    passes the params of its work folder, ``nac.converged.jobs.in_work``: its data/)."""
    from nac.pipeline.datasets import builder

    names = set()
    for p in todo:
        names |= set(P.params_part(params, p)["data"])
    for name in sorted(names):
        b = builder(params["data"], name)
        b.download()
        b.prepare()


def in_pattern_order(pieces: list[P.Piece], patterns: list[str]) -> list[P.Piece]:
    """``pieces`` ordered by the first of ``patterns`` each matches (the profile's order within one
    pattern): ``--pattern-order``, for a loan that must start the pieces suited to its device first."""
    first = {p.id: next(i for i, pat in enumerate(patterns) if fnmatch(p.id, pat)) for p in pieces}
    return sorted(pieces, key=lambda p: first[p.id])  # stable: the profile's order within a pattern


def run(args: argparse.Namespace, params: dict) -> list[dict]:
    """Run the pieces to do (see the module docstring); returns the records and skip notes."""
    from nac.pipeline.pool import run_jobs

    root, profile = Path(args.pieces).resolve(), params["profile"]
    rows = P.status(root, profile, params, ROOT, P.select(P.plan(params), args.only))
    damaged = [(p, why) for p, st, _, why in rows if st == "damaged"]
    rerun_damaged = getattr(args, "rerun_damaged", False)
    todo = [
        p
        for p, st, _, _ in rows
        if st == "missing" or (st == "stale" and args.rerun_stale) or (st == "damaged" and rerun_damaged)
    ]
    if damaged and not rerun_damaged:
        print(
            f"{len(damaged)} damaged piece(s) kept out of the report ({damaged[0][0].id}: {damaged[0][1]}); "
            "--rerun-damaged reruns them"
        )
    if getattr(args, "pattern_order", False) and args.only:
        todo = in_pattern_order(todo, args.only)
    stale = sum(1 for r in rows if r[1] == "stale")
    if stale and not args.rerun_stale:
        print(f"{stale} stale piece(s) kept as they are (--list names them, --rerun-stale reruns them)")
    if not todo:
        print(f"nothing to run: every selected piece of {profile} is written")
        return []
    start = piece_jobs.now()
    deadline = start + 60.0 * args.budget
    work = Path(args.workdir).resolve() / profile
    work.mkdir(parents=True, exist_ok=True)
    if args.workers:
        os.environ["NAC_WORKERS"] = str(args.workers)
    device_kind, _ = piece_jobs.device_of(params)
    stop = work / f".stop-{uuid.uuid4().hex[:8]}"
    ctx = {
        "workdir": str(work),
        "pieces": str(root),
        "code_root": str(ROOT),
        "deadline": deadline,
        "predicted": predictions(root, params, device_kind),
        "stop": str(stop),
        "keep_checkpoint": args.keep_checkpoints,
        "commit": source_commit(),
        "command": " ".join(["python tools/run_converged.py", *(args.argv or [])]),
        "cuda_graphs": bool(getattr(args, "cuda_graphs", False)) and device_kind != "CPU",  # (kind: the GPU's name)
    }
    over = [False]

    def end_of_budget(signum, frame):
        over[0] = True
        raise BudgetOver("budget over")

    previous = signal.signal(signal.SIGALRM, end_of_budget)
    results: list[dict] = []
    try:
        prepare_data(piece_jobs.in_work(params, work)[0], todo)
        left = deadline - piece_jobs.now()
        if left <= 0:
            over[0] = True  # (the data preparation took the whole budget)
            raise BudgetOver("budget over")
        signal.setitimer(signal.ITIMER_REAL, left)
        print(f"{len(todo)} piece(s) to run on {device_kind}, budget {args.budget:g} min; first {todo[0].id}")
        results = run_jobs(
            piece_jobs.run_piece,
            [(params, p.id, ctx) for p in todo],
            device=params.get("device", "auto"),
            desc="pieces",
            label=lambda job: job[1],
            outcome=lambda r: f"not started ({r[piece_jobs.SKIPPED]})" if piece_jobs.SKIPPED in r else "done",
            workdir=work,
        )
    except (KeyboardInterrupt, SystemExit) as e:
        if not over[0]:
            if isinstance(e, Terminated) or TERMINATED[0]:
                print(
                    f"stopped by SIGTERM: the pieces still running were stopped; their checkpoints (per epoch) stay "
                    f"in {work}, and the same command resumes them. Nothing half-written is kept."
                )
                raise SystemExit(143) from None
            raise
        print(
            f"budget of {args.budget:g} min over: the pieces still running were stopped; their checkpoints "
            f"(per epoch) stay in {work}, and the same command resumes them. Nothing half-written is kept."
        )
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        stop.unlink(missing_ok=True)
    done = [r for r in results if r and piece_jobs.SKIPPED not in r]
    skipped = [r for r in results if r and piece_jobs.SKIPPED in r]
    for r in done:
        print(f"wrote {r['id']} ({r['wall_s'] / 60:.1f} min on {r['device_kind']})")
    if skipped:
        print(f"not started ({len(skipped)}): {skipped[0]['id']}: {skipped[0][piece_jobs.SKIPPED]}")
    after = P.status(root, profile, params, ROOT)
    before = {p.id for p, st, _, _ in rows if st == "done"}
    selected = {p.id for p, _, _, _ in rows}
    new = [p.id for p, st, _, _ in after if st == "done" and p.id in selected and p.id not in before]
    print(
        f"this command wrote {len(new)} piece(s); {sum(1 for r in after if r[1] == 'done')} of {len(after)} "
        f"pieces of {profile} done"
    )
    return results


def prove_equal(args: argparse.Namespace) -> int:
    """``--prove-equal COMMIT``: 0 and the proof recorded when the pieces are equal, 1 (with where
    they differ) when not."""
    import tempfile

    from nac.converged import equal

    with tempfile.TemporaryDirectory(prefix="prove-equal-") as tmp:
        print(f"running {args.proof_profile}'s pieces with the code of {args.prove_equal} and with this checkout's ...")
        try:
            got = equal.prove(ROOT, args.prove_equal, Path(tmp), args.proof_profile, args.workers or 2, args.only)
        except equal.ProofError as e:
            print(f"no proof: {e}", file=sys.stderr)
            return 1
    if not got["equal"]:
        print(
            f"not equal: the {got['pieces']} pieces differ (first differences below); nothing recorded", file=sys.stderr
        )
        for d in got["differences"]:
            print(f"  {d}", file=sys.stderr)
        return 1
    if not got["entries"]:
        print(f"equal, and no kind of piece compared has other code than {got['commit'][:7]}: nothing to record")
        return 0
    f = equal.record(Path(args.pieces), got["entries"])
    kinds = ", ".join(e["kind"] for e in got["entries"])
    print(f"equal: {got['pieces']} pieces, every metric; proof for {kinds} recorded in {f}")
    return 0


def prove_gpu(args: argparse.Namespace, params: dict, root: Path) -> int:
    """``--prove-gpu PIECE``: the GPU piece recomputed on the CPU, compared, the proof recorded (0 when
    it holds, 1 when it does not or cannot be made; one line says why)."""
    from nac.converged import gpu_proof

    profile = params["profile"]
    piece = next((p for p in P.plan(params) if p.id == args.prove_gpu), None)
    rec = P.read(root, profile, piece) if piece is not None else None
    if piece is None or piece.track != "image" or rec is None:
        print(f"--prove-gpu {args.prove_gpu}: not a written image piece of {profile} under {root}", file=sys.stderr)
        return 1
    if rec.get("device_kind", "CPU") == "CPU":
        print(f"--prove-gpu {piece.id}: it ran on the CPU ({rec.get('device')}); name a piece that ran on a GPU")
        return 1
    missing = [s for s in params["seeds"] if P.read(root, profile, P.Piece("image", piece.run, int(s))) is None]
    if missing:
        print(f"--prove-gpu {piece.id}: the rule needs every seed's piece of {piece.run}; missing seeds {missing}")
        return 1
    cpu_params = dict(params, device="cpu")
    out = root.parent / gpu_proof.RECOMPUTED / "pieces"
    work = Path(args.workdir).resolve().parent / "gpu_proof" / profile
    work.mkdir(parents=True, exist_ok=True)
    ctx = {
        "workdir": str(work),
        "pieces": str(out),
        "code_root": str(ROOT),
        "deadline": float("inf"),
        "predicted": {},
        "stop": str(work / ".stop-gpu-proof"),
        "keep_checkpoint": False,
        "commit": source_commit(),
        "command": " ".join(["python tools/run_converged.py", *(args.argv or [])]),
    }
    if P.read(out, profile, piece) is None:
        print(f"recomputing {piece.id} on the CPU into {out} (its checkpoint per epoch in {work}) ...")
        prepare_data(piece_jobs.in_work(cpu_params, work)[0], [piece])
        got = piece_jobs.run_piece(cpu_params, piece.id, ctx)
        if piece_jobs.SKIPPED in got:
            print(f"--prove-gpu {piece.id}: not recomputed: {got[piece_jobs.SKIPPED]}", file=sys.stderr)
            return 1
    cpu_rec = P.read(out, profile, piece)
    got = gpu_proof.compare(params, root, piece, piece.path(out, profile))
    entry = {
        "piece": piece.id,
        "profile": profile,
        "date": gpu_proof.now(),
        "gpu_device": rec.get("device_kind"),
        "gpu_record": {k: rec.get(k) for k in ("commit", "fingerprint", "device", "start", "end", "wall_s")},
        "cpu_record": {k: cpu_rec.get(k) for k in ("commit", "dirty", "fingerprint", "device", "start", "end")},
        **got,
    }
    f = gpu_proof.record(root.parent, entry)
    for k, r in got["metrics"].items():
        d = abs(r["difference"])
        print(f"{k}: GPU {r['gpu']:.2f}, CPU {r['cpu']:.2f}, |d| {d:.2f}, tolerance {r['tolerance']:.2f}: {r['holds']}")
    print(f"the proof {'holds' if got['holds'] else 'does not hold'}; recorded in {f}")
    return 0 if got["holds"] else 1


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="converged")
    ap.add_argument("--budget", type=float, help="minutes of wall time this command may use")
    ap.add_argument("--workers", type=int, help="pieces side by side (NAC_WORKERS; default as the pool's)")
    ap.add_argument("--list", action="store_true", help="list the pieces and their status, run nothing")
    ap.add_argument("--only", nargs="+", metavar="PATTERN", help="piece ids to consider (shell patterns)")
    ap.add_argument(
        "--pattern-order",
        action="store_true",
        help="start the pieces in the order of the --only patterns (default: the profile's priority order)",
    )
    ap.add_argument("--rerun-stale", action="store_true", help="rerun the pieces whose code or params changed")
    ap.add_argument("--rerun-damaged", action="store_true", help="rerun the pieces --list calls damaged")
    ap.add_argument(
        "--allow-dirty",
        action="store_true",
        help="run pieces from a checkout with uncommitted changes (their records say dirty; so does the report)",
    )
    ap.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="on a GPU, train each piece's models with train.cuda_graphs: true where they can be captured "
        "(not the Modular Network: its own objective); not a piece's params, as the device is not",
    )
    ap.add_argument("--keep-checkpoints", action="store_true", help="keep each piece's checkpoint in --workdir")
    ap.add_argument("--workdir", default=str(ROOT / "build" / "converged"), help="data/ and models/ (git-ignored)")
    ap.add_argument("--pieces", default=str(ROOT / P.PIECES), help="where pieces are written")
    ap.add_argument(
        "--prove-equal",
        metavar="COMMIT",
        help="run --proof-profile's pieces with COMMIT's code and this checkout's, compare them, and where every "
        "metric is equal record the proof so that pieces written under COMMIT's code stay done (nac.converged.equal)",
    )
    ap.add_argument("--proof-profile", default="converged_smoke", help="the profile --prove-equal runs (small)")
    ap.add_argument(
        "--prove-gpu",
        metavar="PIECE",
        help="recompute PIECE, an image piece that ran on a GPU, on this machine's CPU (into results/converged/"
        "gpu_proof/, never over the piece) and compare the two by docs/convergence.md's rule (nac.converged.gpu_proof)",
    )
    ap.add_argument(
        "--archive",
        metavar="NAME",
        help="keep the profile's finished run as the record NAME of its benchmark before the benchmark changes: "
        "move its pieces, all done, to results/converged/records/NAME/ with the params they were judged against "
        "(nac.converged.records; the report builds reports/records/NAME/); needs --about FILE",
    )
    ap.add_argument(
        "--about", metavar="FILE", help="with --archive: YAML with title, could_show and could_not_show (text)"
    )
    args = ap.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    if bool(args.archive) != bool(args.about):
        ap.error("--archive NAME and --about FILE go together")
    if args.workers is not None and args.workers < 1:
        ap.error(f"--workers must be >= 1, got {args.workers}")
    if args.budget is not None and not (math.isfinite(args.budget) and args.budget >= MIN_BUDGET):
        ap.error(f"--budget {args.budget:g}: give a finite number of minutes, at least {MIN_BUDGET:g}")
    if args.prove_equal:
        sys.exit(prove_equal(args))
    try:
        params = load(args.profile)
    except Exception as e:  # Hydra: an unknown profile
        ap.error(f"--profile {args.profile}: {e}")
    root = Path(args.pieces).resolve()
    if args.prove_gpu:
        sys.exit(prove_gpu(args, params, root))
    if args.archive:
        from nac.converged import records

        try:
            dest = records.archive(
                root.parent, args.profile, args.archive, params, ROOT, records.read_about(args.about)
            )
        except records.RecordError as e:
            sys.exit(f"run_converged.py: {e}")
        print(f"kept the {args.profile} run as the record {args.archive}: {dest}")
        return
    if args.list:  # only reads: a partial folder another run is filling is its own
        try:
            sel = P.select(P.plan(params), args.only)
        except ValueError as e:
            ap.error(str(e))
        rows = P.status(root, args.profile, params, ROOT, sel)
        print(list_pieces(rows, params, piece_jobs.device_of(params)[0], root))
        return
    if args.budget is None:
        ap.error("--budget MINUTES (> 0) is required to run pieces; --list lists them")
    try:
        P.select(P.plan(params), args.only)
    except ValueError as e:
        ap.error(str(e))
    if why := unwritable(root):
        sys.exit(f"run_converged.py: cannot write pieces to {root}: {why}; give a writable folder (--pieces)")
    commit = source_commit()
    if commit.get("dirty") and not args.allow_dirty:
        sys.exit(
            "run_converged.py: the checkout has uncommitted changes to nac/, stages/, conf/ or dvc.yaml; a piece "
            "records the commit whose code ran, so commit them first (or --allow-dirty: the report then marks every "
            "claim such a piece enters as dirty)"
        )
    for d in P.clean_partial(root, args.profile):
        print(f"removed {d} (an interrupted write whose writer is gone)")
    signal.signal(signal.SIGTERM, on_sigterm)
    run(args, params)


if __name__ == "__main__":
    main()
