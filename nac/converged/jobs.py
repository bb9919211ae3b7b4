"""What one piece computes (``nac.converged.pieces``): the tracks' own job functions, for one model
and seed, run in a work folder (its ``data/`` and ``models/``), the small results written as one
piece folder with its provenance.

- an image-ladder run: ``nac.tracks.image.train_image_run`` (history, mechanism numbers) and
  ``evaluate_image_run`` (IID / OOD, the kernel ablation, the baselines' analysis); where it is in
  ``prune.runs``, ``prune_sweep`` for this run and seed (throughput on the first seed only); where a
  few-shot run adapts it, ``nac.tracks.fewshot.run_fewshot`` on the episodes this seed serves, every
  target; a prior NAC's learned link probabilities (Figure 3);
- a run of another track: ``nac.tracks.common.train_track_run``; the NLVR run and seed of
  ``nlvr.analysis`` also ``nac.tracks.nlvr.run_analysis``.

Every path is an argument; nothing changes the working directory. The work folder ``work`` is
handed down as the roots a stage is given (``in_work``): the datasets under ``work/<data.root>``
(``data/``), the checkpoints under ``work/models`` (the library functions' ``models=``). The
checkpoint stays there, so an interrupted piece resumes from it; ``keep_checkpoint=False`` deletes
it once the piece is written.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

from nac.checkpoint_io import load_model
from nac.checkpoint_lock import CheckpointBusyError, CheckpointLock
from nac.converged import pieces as P
from nac.pipeline.datasets import builder, data_root
from nac.pipeline.io import write_json
from nac.pipeline.paths import MODELS, image_checkpoint, parse_run, track_checkpoint
from nac.pipeline.schema_models import section
from nac.provenance import git_commit
from nac.tracks.common import train_track_run
from nac.tracks.fewshot import FewShotConfig, run_fewshot
from nac.tracks.image import evaluate_image_run, prune_sweep, train_image_run
from nac.training.distributed import resolve_device

SKIPPED = "skipped"


def now() -> float:
    """The clock the budget is checked against (tests stand in another)."""
    return time.time()


def _utc(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def device_of(params: dict) -> tuple[str, str]:
    """``(kind, description)``: the GPU's name or ``CPU``, and the device in words."""
    dev = resolve_device(params.get("device", "auto"))
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        return name, f"{name} ({dev})"
    return "CPU", f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)"


def in_work(params: dict, work: str | Path) -> tuple[dict, Path]:
    """``(params, models)`` of a piece run in work folder ``work``: the params with ``data.root``
    taken under ``work`` (``work/data``), and the checkpoints' root ``work/models``. Only what the
    piece computes reads them; its fingerprint reads the params as composed (``data.root`` is in
    no piece's ``params_part`` either way)."""
    work = Path(work)
    data = params["data"]
    return dict(params, data=dict(data, root=str(work / data_root(data)))), work / MODELS


def checkpoint_of(piece: P.Piece, models: str | Path = MODELS) -> Path:
    return (
        image_checkpoint(piece.run, piece.seed, models)
        if piece.track == "image"
        else track_checkpoint(piece.track, piece.run, piece.seed, models)
    )


def _image(params: dict, piece: P.Piece, out: Path, progress: bool, models: Path) -> None:
    run, seed, image = piece.run, piece.seed, section(params, "image")
    data, device = params["data"], params.get("device", "auto")
    write_json(out / "train.json", train_image_run(image, run, seed, progress, data=data, device=device, models=models))
    write_json(out / "eval.json", evaluate_image_run(image, run, seed, data=data, device=device, models=models))
    if P.prunes(params, piece):
        prune = section(params, "prune").model_copy(update={"runs": [run]})  # this run and seed
        rows = prune_sweep(image, prune, progress, data=data, seeds=[seed], device=device, models=models)
        if seed != int(params["seeds"][0]):  # the pipeline times the first seed only
            for r in rows:
                r.pop("images_per_s", None)
        write_json(out / "prune.json", rows)
    variant, prior, control = parse_run(run)
    if variant == "nac" and control is None:  # Figure 3: the learned graph
        p = load_model(checkpoint_of(piece, models)).graph.link_probabilities().detach()
        write_json(out / "graph.json", [[round(float(x), 6) for x in row] for row in p])
    fs_runs, episodes = P.fewshot_runs(params, piece), []
    if fs_runs:
        episodes = P.fewshot_episodes(params, piece)
    if fs_runs and episodes:
        fs = params["fewshot"]
        if fs["source"] != "image":
            raise ValueError(
                f"fewshot.source={fs['source']!r}: pieces adapt the image track's models (source: image); "
                "the pretrain stage's models have no pieces yet, run that profile with dvc repro"
            )
        cfg = FewShotConfig.from_dict(dict(fs.get("protocol") or {}))
        device = resolve_device(params.get("device", "auto"))
        model = load_model(checkpoint_of(piece, models), map_location=device).to(device).eval()
        res: dict[str, Any] = {}
        for target in fs["targets"]:
            b = builder(params["data"], target)
            rows = run_fewshot(
                {r: [model] * len(params["seeds"]) for r in fs_runs},  # episode e reads models[e % len(seeds)]
                {target: b},
                cfg,
                device=device,
                progress=progress,
                seed=int(fs.get("seed", 0)),
                episodes=episodes,
            )
            for r in rows:
                r["model"] = run
            res[target] = {"target": target, "source": fs["source"], "protocol": cfg.to_dict(), "rows": rows}
        write_json(out / "fewshot.json", res)


def _track(params: dict, piece: P.Piece, out: Path, progress: bool, models: Path) -> None:
    sec, data, device = section(params, piece.track), params["data"], params.get("device", "auto")
    got = train_track_run(
        sec,
        piece.run,
        piece.seed,
        progress,
        track=piece.track,
        data=data,
        prior=params["prior"],
        baselines=section(params, "image.baselines"),
        device=device,
        models=models,
    )
    write_json(out / "metrics.json", got)
    if P.analyses(params, piece):
        # deferred: nac.tracks.nlvr imports nac.stats, hence scipy.stats (~0.45 s), which
        # `tools/run_converged.py --list` and every piece but the NLVR analysis's would pay for nothing
        from nac.tracks.nlvr import run_analysis

        run_analysis(sec, str(out), progress, data=data, seeds=params["seeds"], device=device, models=models)


def compute(params: dict, piece: P.Piece, out: Path, progress: bool = True, *, models: str | Path = MODELS) -> None:
    """The piece's metrics files into ``out``: the datasets under ``params``' ``data.root``, the
    checkpoint under ``models`` (``in_work`` gives both for a work folder)."""
    (_image if piece.track == "image" else _track)(params, piece, out, progress, Path(models))


def _cannot_write(e: OSError, ctx: dict) -> bool:
    """An OSError of a full, read-only or forbidden pieces or work folder (what ``run_piece`` says in
    one line), not one of the computation itself (a missing dataset file, say)."""
    if e.errno not in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT, errno.EPERM):
        return False
    where = Path(e.filename).resolve() if e.filename else None
    roots = [Path(ctx["pieces"]).resolve(), Path(ctx["workdir"]).resolve()]
    return where is None or any(where == r or r in where.parents for r in roots)


# The code fingerprint of each kind of piece when this process first ran one (``loaded_code``): what its
# imported modules hold, which a later edit of the files on disk does not change.
_LOADED: dict[tuple[str, str], str] = {}


def loaded_code(root: str, kind: str, now: str) -> str:
    """The code fingerprint this process runs for pieces of ``kind`` from checkout ``root``: the one on
    disk when it first ran such a piece (``now`` at that first call), since Python keeps the modules
    it imported then."""
    return _LOADED.setdefault((str(Path(root).resolve()), kind), now)


class CodeChanged(RuntimeError):
    """The code on disk changed while a piece ran: its numbers would carry the new code's fingerprint."""


def _held(ckpt: Path) -> bool:
    """Whether another training holds ``ckpt``'s lock now (taken and released at once to find out)."""
    try:
        CheckpointLock(ckpt, owner="run_converged: a check").acquire().release()
    except CheckpointBusyError:
        return True
    return False


def source_commit(ctx: dict) -> dict:
    """The commit of the checkout whose code runs, read when a piece's computation starts
    (``nac.provenance.git_commit``; where git cannot say, the one ``NAC_SOURCE_COMMIT`` names, marked
    as such; ``{"commit": "unknown"}`` when neither can)."""
    got = git_commit(ctx["code_root"])
    named = os.environ.get("NAC_SOURCE_COMMIT", "").strip()
    if got["commit"] is None:
        if named:
            return {"commit": named, "dirty": None, "commit_from": "NAC_SOURCE_COMMIT (the copy had no .git)"}
        return {"commit": "unknown", "dirty": None, "commit_from": "no .git of its own and no NAC_SOURCE_COMMIT"}
    return got


class Stretches:
    """The stretches of work one piece took (``<checkpoint>.stretches.json`` beside its checkpoint,
    which a resumed run continues): each the machine, device, commit, start, end and wall time. A
    stretch that was killed before it could say when it ended gets the time of its checkpoint's last
    write (``end_from`` says so) when the next stretch begins."""

    def __init__(self, ckpt: Path):
        self.ckpt, self.path = Path(ckpt), Path(ckpt).with_name(Path(ckpt).name + ".stretches.json")

    def read(self) -> list[dict]:
        try:
            got = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return got if isinstance(got, list) else []

    def _write(self, rows: list[dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json(self.path, rows)

    def begin(self, row: dict) -> int:
        rows = self.read() if self.ckpt.exists() else []  # no checkpoint: a fresh start, no earlier stretch
        for r in rows:
            if r.get("end") is None:  # killed: its last checkpoint is when it last did work
                if self.ckpt.exists():
                    last = self.ckpt.stat().st_mtime
                    r["end"], r["end_from"] = _utc(last), "its checkpoint's last write (the stretch was killed)"
                    started = dt.datetime.strptime(r["start"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
                    r["wall_s"] = round(max(0.0, last - started.timestamp()), 1)
        rows.append({**row, "end": None, "wall_s": None})
        self._write(rows)
        return len(rows) - 1

    def end(self, index: int, end: str, wall_s: float) -> None:
        rows = self.read()
        if 0 <= index < len(rows):
            rows[index].update(end=end, wall_s=wall_s)
            self._write(rows)


def graphed(ctx: dict, piece: P.Piece) -> bool:
    """Whether ``piece`` trains with ``train.cuda_graphs: true``: asked for (``--cuda-graphs`` on a
    GPU, ``ctx["cuda_graphs"]``) and its model can be captured: every run but the Modular Network,
    which trains with its own objective (``nac.training.graphed.graphs_refusal``)."""
    return bool(ctx.get("cuda_graphs")) and piece.run != "modular_network"


def run_piece(
    params: dict,
    piece_id: str,
    ctx: dict[str, Any],
    progress: bool = True,
) -> dict[str, Any]:
    """One job of ``tools/run_converged.py`` (a ``nac.pipeline.pool.run_jobs`` job): unless the
    budget is over, compute the piece with the data and checkpoint of the work folder
    ``ctx["workdir"]`` (``in_work``; the working directory is not changed) and write it
    atomically to ``ctx["pieces"]/<profile>/...`` with its record. Returns the record, or
    ``{"id", "skipped"}``.

    ``ctx``: ``workdir``, ``pieces`` (absolute paths), ``code_root`` (the checkout whose code runs: fingerprinted),
    ``deadline`` (epoch seconds), ``predicted`` ({piece id: seconds} where a prediction exists),
    ``stop`` (a file: once a piece does not fit, no later piece starts), ``keep_checkpoint``,
    ``commit``, ``command``."""
    piece = next(p for p in P.plan(params) if p.id == piece_id)
    stop = Path(ctx["stop"])
    rooted, models = in_work(params, ctx["workdir"])
    predicted = ctx["predicted"].get(piece_id)
    start = now()
    if stop.exists():
        return {"id": piece_id, SKIPPED: "an earlier piece did not fit the budget"}
    if predicted is not None and start + predicted > ctx["deadline"]:
        stop.write_text(piece_id, encoding="utf-8")
        left = max(0.0, ctx["deadline"] - start)
        return {
            "id": piece_id,
            SKIPPED: f"predicted {predicted / 60:.1f} min, {left / 60:.1f} min of the budget left",
        }
    kind, device = device_of(params)
    graphs = graphed(ctx, piece)
    if graphs:  # (params_part leaves train.cuda_graphs out: the piece's fingerprint is the eager one's)
        sec = rooted[piece.track]
        rooted = dict(rooted, **{piece.track: dict(sec, train=dict(sec["train"], cuda_graphs=True))})
    ckpt = checkpoint_of(piece, models)
    resumed = ckpt.exists()
    profile = params["profile"]
    # the code that runs: the checkout's commit and the piece's code fingerprint when its computation starts,
    # which must be the code this process imported (its first piece of this kind): else the files changed since
    code = {**source_commit(ctx), "fingerprint": P.fingerprint(ctx["code_root"], params, piece)}
    now_code = code["fingerprint"]["code"]
    if loaded_code(ctx["code_root"], P.kind(params, piece), now_code) != now_code:
        return {
            "id": piece_id,
            SKIPPED: "the code on disk changed since this worker imported it: not started; a new command runs it "
            "under the new code",
        }
    if _held(ckpt):  # a second runner: before it touches the piece's stretches
        return {"id": piece_id, SKIPPED: f"another run holds its checkpoint {ckpt}; it goes on there"}
    stretches = Stretches(ckpt)
    stretch = stretches.begin(
        {
            "machine": f"{platform.node() or 'unknown host'} ({platform.platform()})",
            "device": device,
            "device_kind": kind,
            "commit": code.get("commit"),
            "dirty": code.get("dirty"),
            "start": _utc(start),
        }
    )

    def write(tmp: Path) -> None:
        try:
            compute(rooted, piece, tmp, progress, models=models)
        finally:
            end = now()
            stretches.end(stretch, _utc(end), round(end - start, 1))
        after = P.fingerprint(ctx["code_root"], params, piece)
        if after != code["fingerprint"]:
            raise CodeChanged(
                f"{piece_id}: the code on disk changed while it ran (its fingerprint at the start and now differ): "
                f"not written; the same command reruns it under the new code (its checkpoint is kept)"
            )
        every = stretches.read()
        record = {
            "id": piece_id,
            "profile": profile,
            "track": piece.track,
            "run": piece.run,
            "seed": piece.seed,
            **ctx["commit"],
            **{k: v for k, v in code.items() if k != "fingerprint"},  # the commit whose code ran (at its start)
            "fingerprint": code["fingerprint"],
            "device_kind": kind,
            "device": device,
            "cuda_graphs": graphs,
            "machine": f"{platform.node() or 'unknown host'} ({platform.platform()})",
            "workers": {k: v for k, v in os.environ.items() if k.startswith("NAC_")},
            "resumed_from_checkpoint": resumed,
            "start": _utc(start),
            "end": _utc(end),
            "wall_s": round(end - start, 1),
            "stretches": every,
            "wall_s_total": round(sum(x.get("wall_s") or 0.0 for x in every), 1),
            "files": sorted(f.name for f in tmp.iterdir() if not f.name.startswith(".")),
            "command": ctx["command"],
        }
        write_json(tmp / P.RECORD, record)

    try:
        dest = P.write_piece(piece.path(ctx["pieces"], profile), write)
    except CodeChanged as e:  # one line; the piece is left to rerun (its checkpoint kept)
        return {"id": piece_id, SKIPPED: str(e)}
    except CheckpointBusyError as e:  # a second runner on the same piece
        return {"id": piece_id, SKIPPED: f"another run holds its checkpoint ({e}); it goes on there"}
    except OSError as e:  # a read-only or full pieces or work folder: one line; any other error is raised
        if not _cannot_write(e, ctx):
            raise
        where = e.filename or ctx["pieces"]
        return {
            "id": piece_id,
            SKIPPED: f"could not write {where}: {e.strerror or e}; free space or give a writable folder (its "
            "checkpoint, if any, is kept)",
        }
    if not ctx.get("keep_checkpoint"):
        for f in (ckpt, ckpt.with_name(ckpt.name + ".lock"), stretches.path):
            f.unlink(missing_ok=True)
    return P.read(ctx["pieces"], profile, piece) or {"id": piece_id, "written": str(dest)}
