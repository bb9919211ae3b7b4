"""The proof of the GPU path (issue 46; the rule in docs/convergence.md, "The GPU path", written before
any recomputation ran): a converged-size image piece that ran on a GPU, recomputed on a CPU from its
seed, differs from its CPU recomputation no more than two seeds of the same model do.

For each of ``METRICS`` (the final train accuracy, IID and OOD top-1): ``|GPU - CPU| <= 1.96 x
sqrt(2) x max(SD, s_b)``, SD the standard deviation of the metric over the model's committed seeds,
s_b the binomial SE of one accuracy on the n images it is measured on (the floor where the seeds
agree to the image). ``compare`` gives the numbers and the verdict; ``record`` keeps each proof in
``results/converged/gpu_proof.json`` (beside the pieces), which the converged report reads
(``summary``)."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from statistics import stdev

from nac.converged import pieces as P
from nac.stats import binomial_se

PROOF = "gpu_proof.json"  # beside the pieces folder: results/converged/gpu_proof.json
RECOMPUTED = "gpu_proof"  # the recomputed pieces: results/converged/gpu_proof/pieces/<profile>/...
METRICS = (("train.json", "train_acc", "train"), ("eval.json", "iid_acc1", "iid"), ("eval.json", "ood_acc1", "ood"))
RULE = (
    "|GPU - CPU| <= 1.96 x sqrt(2) x max(SD over the model's committed seeds, binomial SE of one accuracy on its n "
    "images), for the final train accuracy, IID top-1 and OOD top-1 (docs/convergence.md, 'The GPU path')"
)


def _value(folder: Path, file: str, key: str) -> float:
    return float(json.loads((folder / file).read_text(encoding="utf-8"))[key])


def _n(params: dict, folder: Path, which: str) -> int:
    """The images an accuracy is measured on: the eval file's count, or the training set's size."""
    if which == "train":
        return int(params["data"][params["image"]["dataset"]]["n_train"])
    return int(json.loads((folder / "eval.json").read_text(encoding="utf-8"))[f"{which}_n"])


def compare(params: dict, pieces_root: Path, piece: P.Piece, cpu_folder: Path) -> dict:
    """The GPU piece ``piece`` (committed under ``pieces_root``) against its CPU recomputation in
    ``cpu_folder``: per metric the two values, the seeds' SD, the binomial floor, the tolerance and
    whether it holds; ``holds`` when all do."""
    profile = params["profile"]
    gpu_folder = piece.path(pieces_root, profile)
    seeds = [P.Piece(piece.track, piece.run, int(s)).path(pieces_root, profile) for s in params["seeds"]]
    rows = {}
    for file, key, which in METRICS:
        gpu, cpu = _value(gpu_folder, file, key), _value(cpu_folder, file, key)
        values = [_value(f, file, key) for f in seeds]
        s_b = binomial_se(min(max(sum(values) / len(values), 0.0), 100.0), _n(params, gpu_folder, which))
        sd = stdev(values)
        tol = 1.96 * math.sqrt(2) * max(sd, s_b)
        rows[key] = {
            "gpu": gpu,
            "cpu": cpu,
            "difference": gpu - cpu,
            "seeds": values,
            "sd_seeds": sd,
            "binomial_se": s_b,
            "tolerance": tol,
            "holds": abs(gpu - cpu) <= tol,
        }
    return {"metrics": rows, "holds": all(r["holds"] for r in rows.values()), "rule": RULE}


def record(results: Path, entry: dict) -> Path:
    """Add ``entry`` (one proof) to ``results/gpu_proof.json``, replacing an earlier one of its piece."""
    f = results / PROOF
    got = json.loads(f.read_text(encoding="utf-8")) if f.is_file() else []
    got = [e for e in got if (e["piece"], e["profile"]) != (entry["piece"], entry["profile"])] + [entry]
    f.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return f


def summary(results: Path, profile: str) -> str:
    """What the equality proofs cover, for the converged report: the CPU proofs of equal code, and the
    GPU path's proof or that there is none."""
    proofs = P.equal_code(results / "pieces")
    cpu = (
        f"{len(proofs)} proof(s) of equal code (`--prove-equal`): each runs the `converged_smoke` pieces on this "
        "repository's CPU at their small sizes with the old and the new code and finds every metric equal; pieces of "
        "other devices and sizes are carried over on them."
        if proofs
        else "No proof of equal code is recorded."
    )
    f = results / PROOF
    gpu = [e for e in (json.loads(f.read_text(encoding="utf-8")) if f.is_file() else []) if e["profile"] == profile]
    if not gpu:
        return cpu + " **The GPU path is not proven**: no piece that ran on a GPU has been recomputed on a CPU yet."
    lines = []
    for e in gpu:
        diffs = ", ".join(
            f"{k} {r['gpu']:.2f} vs {r['cpu']:.2f} (|d| {abs(r['difference']):.2f}, tolerance {r['tolerance']:.2f})"
            for k, r in e["metrics"].items()
        )
        state = "holds" if e["holds"] else "**does not hold**"
        where = f"{e['piece']} ({e['gpu_device']}) recomputed on the CPU ({e['date']})"
        lines.append(f"{where}: the proof {state}: {diffs}")
    return cpu + " The GPU path (" + RULE + "): " + "; ".join(lines) + "."


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
