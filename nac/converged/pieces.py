"""A profile run kept as pieces: one model and seed of one track with everything measured on it,
written once, small, with its provenance (``tools/run_converged.py``; docs/convergence.md).

A piece is ``<track>/<run>-<seed>``: an image-ladder run (trained, evaluated IID / OOD with the
kernel ablation and the mechanism numbers, its dropping curve when it is in ``prune.runs``, its
few-shot episodes when a few-shot run adapts it, its learned graph) or a run of another track
(trained, evaluated; the NLVR run and seed of ``nlvr.analysis`` with the analysis of its graphs).
Its files live in ``<pieces>/<profile>/<track>/<run>-<seed>/``; ``piece.json`` is written last
and the folder appears by one rename (``write_piece``), so a folder without it never exists.

This module is the bookkeeping: the pieces of a profile in priority order (``plan``), their
fingerprints (``fingerprint``: the code the piece's job runs, ``nac.imports.reached`` from its
track's job modules, and the params it reads), their status against a checkout (``status``) and
the metrics tree they make together (``assemble``). What one piece computes is
``nac.converged.jobs``; this module is not part of any piece's fingerprint, so changing the
order or the listing makes no piece stale.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import uuid
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Iterable

import psutil

from nac.imports import files_run_by_import, reached

PIECES = Path("results/converged/pieces")
RECORD = "piece.json"
EQUAL_CODE = "equal_code.json"  # beside the pieces folder: code fingerprints proven to compute the same pieces
TRACKS = ("points", "listops", "text", "nlvr")
# the modules whose job functions a piece runs (their import closure is its code)
JOB_MODULES = {
    "image": ("nac.tracks.image", "nac.tracks.fewshot"),
    "track": ("nac.tracks.common",),
    "nlvr_analysis": ("nac.tracks.common", "nac.tracks.nlvr"),
}
JOB_FILE = "nac/converged/jobs.py"  # the piece's own job (its bytes, not its imports: those are per kind)
STATUSES = ("done", "stale", "damaged", "missing")
OWNER = ".owner.json"  # in a partial folder: the process writing it (pid, its start time, the host)


@dataclass(frozen=True)
class Piece:
    track: str  # "image" or one of TRACKS
    run: str
    seed: int

    @property
    def id(self) -> str:
        return f"{self.track}/{self.run}-{self.seed}"

    def path(self, root: str | Path, profile: str) -> Path:
        return Path(root) / profile / self.track / f"{self.run}-{self.seed}"


def headline_runs(params: dict) -> list[str]:
    """The headline pair and the NAC's controls, those of the ladder: ``nac-<prior>``,
    ``perceiver_io``, ``nac-<prior>-noreg``, ``nac-<prior>-randinit``."""
    head = f"nac-{params['prior']['name']}"
    return [r for r in (head, "perceiver_io", f"{head}-noreg", f"{head}-randinit") if r in params["image"]["ladder"]]


def plan(params: dict) -> list[Piece]:
    """Every piece of a profile, in the order they are run: the headline pair and its controls seed
    by seed, then the rest of the image ladder (and its baselines) seed by seed, then each other
    track (points, listops, text, nlvr), seed by seed."""
    seeds = [int(s) for s in params["seeds"]]
    out: list[Piece] = []
    if "image" in params:
        head = headline_runs(params)
        out += [Piece("image", r, s) for s in seeds for r in head]
        out += [Piece("image", r, s) for s in seeds for r in params["image"]["ladder"] if r not in head]
    for track in TRACKS:
        if track in params:
            out += [Piece(track, r, s) for s in seeds for r in params[track]["runs"]]
    return out


def select(pieces: list[Piece], patterns: Iterable[str] | None) -> list[Piece]:
    """The pieces whose id matches one of the shell ``patterns`` (``image/nac-*-0``, ``points/*``);
    all when none. A pattern that matches nothing is an error naming the ids."""
    patterns = list(patterns or [])
    if not patterns:
        return pieces
    for p in patterns:
        if not any(fnmatch(x.id, p) for x in pieces):
            raise ValueError(f"--only {p!r} matches no piece; ids look like {pieces[0].id} (see --list)")
    return [x for x in pieces if any(fnmatch(x.id, p) for p in patterns)]


# ------------------------------------------------------------------------------ roles and fingerprints
def fewshot_runs(params: dict, piece: Piece) -> list[str]:
    """The few-shot runs that adapt this image piece's model (``fewshot.source: image``)."""
    fs = params.get("fewshot")
    if piece.track != "image" or not fs:
        return []
    # deferred: nac.pipeline.paths imports nac.registry, hence torch (~1.2 s) and ~1.4 s more (scipy.optimize); this
    # module is torch-free for tools/window_pieces.py and the records (nac.converged.records)
    from nac.pipeline.paths import fewshot_image_run

    return [r for r in fs["runs"] if fewshot_image_run(params["prior"], r) == piece.run]


def fewshot_episodes(params: dict, piece: Piece) -> list[int]:
    """The episodes of each target that adapt this seed's model: episode ``e`` uses seed
    ``seeds[e % len(seeds)]`` (``nac.tracks.fewshot``)."""
    seeds = [int(s) for s in params["seeds"]]
    episodes = int((params["fewshot"].get("protocol") or {}).get("episodes", 5))
    return [e for e in range(episodes) if e % len(seeds) == seeds.index(piece.seed)]


def prunes(params: dict, piece: Piece) -> bool:
    return piece.track == "image" and piece.run in (params.get("prune") or {}).get("runs", [])


def analyses(params: dict, piece: Piece) -> bool:
    """Whether this is the NLVR run and seed whose graphs ``nlvr.analysis`` analyses."""
    if piece.track != "nlvr":
        return False
    a = params["nlvr"].get("analysis") or {}
    return piece.run == a.get("run", "conditional") and piece.seed == int(a.get("seed", params["seeds"][0]))


def kind(params: dict, piece: Piece) -> str:
    if piece.track == "image":
        return "image"
    return "nlvr_analysis" if analyses(params, piece) else "track"


def params_part(params: dict, piece: Piece) -> dict[str, Any]:
    """The params a piece's result depends on: its track's section (without the list of runs),
    the data section of each dataset it reads, its seed; with the prune section where it is pruned,
    the few-shot section and the seeds list where it is adapted (which episodes it serves), the
    analysis where it is analysed, the prior where its track's NACs read it. ``train.cuda_graphs`` is
    left out: it changes how a step runs (equal to the eager step to bf16 rounding), as the device does."""
    t, data = piece.track, params["data"]
    part: dict[str, Any] = {"seed": piece.seed}
    if t == "image":
        image = params["image"]
        part["image"] = {k: v for k, v in image.items() if k != "ladder"}
        datasets = [image["dataset"], image["ood_dataset"]]
        if prunes(params, piece):
            part["prune"] = {k: v for k, v in params["prune"].items() if k != "runs"}
            part["throughput"] = piece.seed == int(params["seeds"][0])  # measured on the first seed only
        if fewshot_runs(params, piece):
            fs = params["fewshot"]
            part["fewshot"] = {k: v for k, v in fs.items() if k != "runs"}
            part["fewshot_runs"] = fewshot_runs(params, piece)
            part["seeds"] = [int(s) for s in params["seeds"]]
            datasets += list(fs["targets"])
    else:
        sec = params[t]
        part[t] = {k: v for k, v in sec.items() if k not in ("runs", "analysis")}
        if analyses(params, piece):
            part["analysis"] = sec.get("analysis")
        part["prior"] = params.get("prior")
        if piece.run == "neural_interpreter":
            part["neural_interpreter"] = (params.get("image", {}).get("baselines") or {}).get("neural_interpreter")
        datasets = [sec["dataset"]]
    part["data"] = {d: data.get(d) for d in datasets}
    for sec in part.values():  # how the step runs, not what it computes (as the device): not a piece's params
        if isinstance(sec, dict) and isinstance(sec.get("train"), dict):
            sec["train"] = {k: v for k, v in sec["train"].items() if k != "cuda_graphs"}
    return part


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def code_files(root: str | Path, params: dict, piece: Piece) -> list[Path]:
    """The ``nac`` files a piece's job can run: everything reached from its kind's job modules
    (``JOB_MODULES``), and the piece job itself."""
    root = Path(root)
    starts = [f for m in JOB_MODULES[kind(params, piece)] for f in files_run_by_import(root, m)]
    return sorted(reached(root, starts) | {root / JOB_FILE})


def fingerprint(root: str | Path, params: dict, piece: Piece) -> dict[str, str]:
    """``{"code": sha256 of the relative paths and bytes of code_files, "params": sha256 of params_part}``."""
    root = Path(root)
    h = hashlib.sha256()
    for f in code_files(root, params, piece):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return {"code": h.hexdigest(), "params": _sha(params_part(params, piece))}


# ------------------------------------------------------------------------------ the store
def read(root: str | Path, profile: str, piece: Piece) -> dict | None:
    """The record (``piece.json``) of a whole piece (``damage`` finds nothing wrong), None otherwise."""
    rec, damage = inspect(root, profile, piece)
    return None if damage else rec


def inspect(root: str | Path, profile: str, piece: Piece) -> tuple[dict | None, str]:
    """``(record, damage)`` of a piece's folder: ``(None, "")`` where it has none; ``damage`` is ""
    for a whole piece, else ``"<file>: <what is wrong>"``: a record that does not parse or is not
    an object, one that names another id, seed, profile or track, a file it lists that is absent or
    (JSON) does not parse. A piece is done only when it is whole (issue 47)."""
    d = piece.path(root, profile)
    f = d / RECORD
    if not d.is_dir():
        return None, ""
    if not f.is_file():
        return None, f"{RECORD}: absent from a piece folder"
    try:
        rec = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return None, f"{RECORD}: does not parse ({type(e).__name__}: {str(e)[:80]})"
    if not isinstance(rec, dict):
        return None, f"{RECORD}: holds {type(rec).__name__}, not a record"
    for key, want in (("id", piece.id), ("seed", piece.seed), ("profile", profile), ("track", piece.track)):
        if rec.get(key) != want:
            return rec, f"{RECORD}: names {key} {rec.get(key)!r}, the folder is {want!r}"
    files = rec.get("files")
    if not isinstance(files, list) or not files:
        return rec, f"{RECORD}: lists no files"
    for name in files:
        g = d / name
        if not g.is_file():
            return rec, f"{name}: listed in {RECORD}, absent"
        if name.endswith(".json"):
            try:
                json.loads(g.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                return rec, f"{name}: does not parse ({type(e).__name__})"
    return rec, ""


def equal_code(root: str | Path) -> list[dict]:
    """The proofs of equal code (``<root>/../equal_code.json``, written by ``tools/run_converged.py
    --prove-equal``): entries ``{"from", "to"}`` (code fingerprints) with their evidence."""
    f = Path(root).parent / EQUAL_CODE
    return json.loads(f.read_text(encoding="utf-8")) if f.is_file() else []


def carried(proofs: list[dict], old: str, new: str) -> list[dict] | None:
    """The chain of proofs that takes code fingerprint ``old`` to ``new`` (``[]`` when they are
    equal), or None when there is none."""
    if old == new:
        return []
    chains, seen = [(old, [])], {old}
    while chains:
        at, chain = chains.pop(0)
        for e in proofs:
            if e["from"] == at and e["to"] not in seen:
                if e["to"] == new:
                    return [*chain, e]
                seen.add(e["to"])
                chains.append((e["to"], [*chain, e]))
    return None


def status(
    root: str | Path, profile: str, params: dict, code_root: str | Path | None, pieces: list[Piece] | None = None
):
    """``[(piece, status, record, why)]``: ``done`` (written under this code and these params),
    ``stale`` (written, but ``why`` names what changed: its code, its params), ``damaged`` (``why``:
    ``inspect``'s "<file>: <what is wrong>") or ``missing``. A
    piece whose code changed is still ``done`` when a chain of proofs (``equal_code``) takes its
    code to this code; ``why`` then says so ("code carried over from ..."). ``code_root`` None: the
    pieces are read as a record, against nothing but being whole (never ``stale``)."""
    out, proofs = [], equal_code(root) if code_root is not None else []
    for p in plan(params) if pieces is None else pieces:
        rec, damage = inspect(root, profile, p)
        if damage:
            out.append((p, "damaged", rec, damage))
            continue
        if rec is None:
            out.append((p, "missing", None, ""))
            continue
        if code_root is None:
            out.append((p, "done", rec, ""))
            continue
        now = fingerprint(code_root, params, p)
        was = rec.get("fingerprint", {})
        chain = carried(proofs, was.get("code", ""), now["code"])
        why = ([] if chain is not None else ["code"]) + (["params"] if was.get("params") != now["params"] else [])
        if not why and chain:
            note = (
                "code carried over: proven to compute the same pieces ("
                + ", then ".join(f"{e['from_commit'][:7]} to {e['to_commit'][:7]}" for e in chain)
                + ")"
            )
            out.append((p, "done", rec, note))
            continue
        out.append((p, "stale" if why else "done", rec, " and ".join(why)))
    return out


def _owner() -> dict:
    return {"pid": os.getpid(), "started": psutil.Process().create_time(), "host": platform.node()}


def writer_alive(d: Path) -> bool:
    """Whether the process writing the partial folder ``d`` may still be at it: its owner (``OWNER``:
    pid and start time) runs on this machine, or the folder was written on another machine (which
    this one cannot see), or, without an owner file, a process of the pid in its name runs."""
    try:
        owner = json.loads((d / OWNER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        owner = None
    if isinstance(owner, dict) and "pid" in owner:
        if owner.get("host") != platform.node():
            return True
        try:
            return abs(psutil.Process(int(owner["pid"])).create_time() - float(owner["started"])) < 1.0
        except (psutil.Error, ValueError, TypeError):
            return False
    tag = d.name.rsplit(".tmp-", 1)[-1] if ".tmp-" in d.name else ""
    pid = tag.split("-", 1)[0]
    return pid.isdigit() and psutil.pid_exists(int(pid))


def partial(root: str | Path, profile: str) -> list[Path]:
    """The partial folders an unfinished write left or is still filling (``.<name>.tmp-*``, ``.<name>.old-*``)."""
    base = Path(root) / profile
    return sorted(base.glob("*/.*.tmp-*")) + sorted(base.glob("*/.*.old-*"))


def clean_partial(root: str | Path, profile: str) -> list[Path]:
    """Remove what an interrupted write left (``.<name>.tmp-*`` folders whose writer is gone:
    ``writer_alive``) and put back a piece whose replacement stopped between its two renames
    (``.<name>.old-*`` without ``<name>``). A folder a live process is still writing is left alone.
    Returns what was removed. (``tools/run_converged.py --list`` never calls it: listing only reads.)"""
    removed = []
    for d in partial(root, profile):
        if ".old-" in d.name:
            dest = d.parent / d.name[1:].split(".old-")[0]
            if not dest.exists() and (d / RECORD).is_file():
                os.replace(d, dest)
                continue
        elif writer_alive(d):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


def write_piece(dest: Path, write: Any) -> Path:
    """Write a piece atomically: ``write(tmp)`` fills a temporary folder beside ``dest`` (its
    ``piece.json`` last), which then replaces ``dest`` by rename; any error (or interruption)
    removes the temporary folder and leaves ``dest`` as it was."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = dest.parent / f".{dest.name}.tmp-{tag}"
    tmp.mkdir()
    try:
        (tmp / OWNER).write_text(json.dumps(_owner()), encoding="utf-8")
        write(tmp)
        if not (tmp / RECORD).is_file():
            raise RuntimeError(f"piece {dest} was written without its {RECORD}")
        (tmp / OWNER).unlink()
        if dest.exists():  # a stale piece rerun: old aside, new in, old removed
            old = dest.parent / f".{dest.name}.old-{tag}"
            os.replace(dest, old)
            os.replace(tmp, dest)
            shutil.rmtree(old)
        else:
            os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


# ------------------------------------------------------------------------------ the metrics tree
def _load(d: Path, name: str) -> Any:
    return json.loads((d / name).read_text(encoding="utf-8"))


def assemble(root: str | Path, profile: str, params: dict, pieces: list[Piece], out: str | Path) -> dict[str, bool]:
    """The metrics tree (``metrics/``'s layout) of the given written pieces into ``out``: each
    piece's model files; ``image/prune.json`` of their rows (pipeline order); ``fewshot/<target>.json``
    only when every piece few-shot adapts is among them (a target's rows are judged together);
    ``nlvr/`` from the analysed piece; ``graphs.json`` (Figure 3, first seed) beside it. Returns which
    of the shared files were written."""
    out = Path(out)
    have = set(pieces)
    seeds = [int(s) for s in params["seeds"]]
    wrote = {"prune": False, "fewshot": False, "nlvr": False}
    prune_rows, graphs = [], {}
    fewshot: dict[str, list] = {}
    fs_meta: dict[str, dict] = {}
    for p in plan(params):
        if p not in have:
            continue
        d = p.path(root, profile)
        if p.track == "image":
            for k in ("train", "eval"):
                (out / "image" / k).mkdir(parents=True, exist_ok=True)
                shutil.copy2(d / f"{k}.json", out / "image" / k / f"{p.run}-{p.seed}.json")
            if (d / "graph.json").is_file() and p.seed == seeds[0]:
                graphs[p.run.split("-", 1)[1]] = _load(d, "graph.json")
            if (d / "fewshot.json").is_file():
                for target, got in _load(d, "fewshot.json").items():
                    fewshot.setdefault(target, []).extend(got["rows"])
                    fs_meta[target] = {k: v for k, v in got.items() if k != "rows"}
        else:
            (out / "tracks" / p.track).mkdir(parents=True, exist_ok=True)
            shutil.copy2(d / "metrics.json", out / "tracks" / p.track / f"{p.run}-{p.seed}.json")
            if (d / "analysis.json").is_file():
                (out / "nlvr").mkdir(parents=True, exist_ok=True)
                for name in ("analysis.json", "embedding.csv", "examples.json"):
                    shutil.copy2(d / name, out / "nlvr" / name)
                wrote["nlvr"] = True
    if "prune" in params:  # the pipeline's order: run by run, seed by seed
        for run in params["prune"]["runs"]:
            for s in seeds:
                p = Piece("image", run, s)
                if p in have:
                    prune_rows += _load(p.path(root, profile), "prune.json")
        if prune_rows:
            (out / "image").mkdir(parents=True, exist_ok=True)
            (out / "image" / "prune.json").write_text(json.dumps(prune_rows) + "\n", encoding="utf-8")
            wrote["prune"] = True
    needed = [p for p in plan(params) if p.track == "image" and fewshot_runs(params, p) and fewshot_episodes(params, p)]
    if fewshot and all(p in have for p in needed):
        runs = params["fewshot"]["runs"]
        (out / "fewshot").mkdir(parents=True, exist_ok=True)
        for target, rows in fewshot.items():
            rows = sorted(rows, key=lambda r: (r["episode"], runs.index(r["run"]), r["shots"]))
            (out / "fewshot" / f"{target}.json").write_text(
                json.dumps({**fs_meta[target], "rows": rows}) + "\n", encoding="utf-8"
            )
        wrote["fewshot"] = True
    if graphs:
        (out.parent / "graphs.json").write_text(json.dumps(graphs) + "\n", encoding="utf-8")
    return wrote
