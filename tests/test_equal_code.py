"""Proofs of equal code (nac.converged.equal, tools/run_converged.py --prove-equal): pieces written under
code that a refactor changed stay done only where the refactor was shown to compute the same pieces."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nac.converged import equal
from nac.converged import pieces as P
from nac.pipeline.params import compose

ROOT = Path(__file__).resolve().parent.parent


def _piece(folder: Path, pid: str, files: dict[str, object]) -> None:
    d = folder / pid
    d.mkdir(parents=True)
    for name, content in files.items():
        (d / name).write_text(content if isinstance(content, str) else json.dumps(content))


def test_differences_compare_every_value_but_timings_and_not_the_record(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    rows = [{"dropped_fraction": 0.0, "acc1": 90.0, "images_per_s": [100.0, 101.0]}]
    for folder, ips, wall in ((a, 100.0, 1.0), (b, 250.0, 9.0)):
        _piece(
            folder, "image/nac-0", {"prune.json": [{**rows[0], "images_per_s": [ips]}], "piece.json": {"wall_s": wall}}
        )
        _piece(folder, "text/nac-0", {"metrics.json": {"test_acc1": 50.0, "history": [{"epoch": 1}]}})
    assert equal.differences(a, b) == []  # timings and the record differ, nothing else
    (b / "text/nac-0/metrics.json").write_text(json.dumps({"test_acc1": 50.0, "history": [{"epoch": 2}]}))
    _piece(b, "text/nac-1", {"metrics.json": {}})
    (a / "image/nac-0/embedding.csv").write_text("1,2\n")
    (b / "image/nac-0/embedding.csv").write_text("1,3\n")
    (a / "image/nac-0/graph.json").write_text("[]")
    assert equal.differences(a, b) == [
        "text/nac-1: only in the second run",
        "image/nac-0/graph.json: only in the first run",
        "image/nac-0/embedding.csv: the bytes differ",
        "text/nac-0/metrics.json: .history[0].epoch: 1 vs 2",
    ]


def test_a_chain_of_proofs_carries_code_over_and_nothing_else_does():
    proofs = [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}, {"from": "x", "to": "y"}]
    assert P.carried(proofs, "a", "a") == []
    assert P.carried(proofs, "a", "c") == proofs[:2]
    assert P.carried(proofs, "c", "a") is None  # a proof has a direction: old code to new
    assert P.carried(proofs, "a", "y") is None


def test_a_piece_of_changed_code_is_done_only_under_a_proof_and_says_so(tmp_path):
    code = tmp_path / "code"
    for name in ("nac", "conf"):
        shutil.copytree(ROOT / name, code / name, ignore=shutil.ignore_patterns("__pycache__"))
    params = compose(["profile=converged"], conf_dir=code / "conf")
    piece = P.Piece("text", "nac", 0)
    root = tmp_path / "results" / "pieces"
    was = P.fingerprint(code, params, piece)
    whole = {"id": piece.id, "seed": piece.seed, "profile": "converged", "track": piece.track, "files": ["m.json"]}

    def write(t):
        (t / "m.json").write_text("{}")
        (t / P.RECORD).write_text(json.dumps({**whole, "fingerprint": was}))

    P.write_piece(piece.path(root, "converged"), write)
    f = code / "nac" / "tracks" / "common.py"
    f.write_text(f.read_text() + "\n# a refactor\n")
    assert P.status(root, "converged", params, code, [piece])[0][1:4:2] == ("stale", "code")
    now = P.fingerprint(code, params, piece)["code"]
    proof = {"from": was["code"], "to": now, "from_commit": "a" * 40, "to_commit": "b" * 40}
    (root.parent / P.EQUAL_CODE).write_text(json.dumps([proof]))
    _, st, _, why = P.status(root, "converged", params, code, [piece])[0]
    assert st == "done" and why == "code carried over: proven to compute the same pieces (aaaaaaa to bbbbbbb)"
    other = json.loads(json.dumps(params))
    other["text"]["train"]["epochs"] += 1  # a proof of code says nothing of params
    assert P.status(root, "converged", other, code, [piece])[0][1:4:2] == ("stale", "params")


def test_record_keeps_each_proof_once(tmp_path):
    root = tmp_path / "pieces"
    root.mkdir()
    e = {"from": "a", "to": "b", "kind": "track"}
    equal.record(root, [e])
    equal.record(root, [e, {"from": "b", "to": "c", "kind": "track"}])
    assert [(x["from"], x["to"]) for x in P.equal_code(root)] == [("a", "b"), ("b", "c")]


@pytest.mark.slow
def test_prove_equal_records_a_refactor_and_refuses_a_change_of_behaviour(tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--local", str(ROOT), str(repo)], check=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    common = repo / "nac" / "tracks" / "common.py"

    def commit(text: str) -> None:
        common.write_text(text)
        subprocess.run([*git, "commit", "-qam", "edit"], cwd=repo, check=True)

    def prove() -> subprocess.CompletedProcess:
        cmd = [sys.executable, "tools/run_converged.py", "--prove-equal", "HEAD~1", "--only", "text/nac-0"]
        return subprocess.run([*cmd, "--workers", "1"], cwd=repo, capture_output=True, text=True, timeout=600)

    proofs_file = repo / "results" / "converged" / P.EQUAL_CODE
    before = json.loads(proofs_file.read_text()) if proofs_file.exists() else []  # the committed proofs
    text = common.read_text()
    commit(text + "\n# a comment: the same behaviour\n")
    got = prove()
    assert got.returncode == 0, got.stdout + got.stderr
    proofs = json.loads(proofs_file.read_text())
    old = subprocess.run(["git", "rev-parse", "HEAD~1"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert proofs[: len(before)] == before  # kept as they were
    added = proofs[len(before) :]
    assert [(e["kind"], e["from_commit"]) for e in added] == [("track", old)]
    assert "converged_smoke: the 1 pieces selected (text/nac-0)" in added[0]["evidence"]
    # a change of what the piece computes: no proof, and where it differs
    assert '"parameters": count_parameters(model),' in text
    commit(text.replace('"parameters": count_parameters(model),', '"parameters": count_parameters(model) + 1,'))
    got = prove()
    assert got.returncode == 1 and "nothing recorded" in got.stderr
    assert "text/nac-0/metrics.json: .parameters:" in got.stderr
    assert len(json.loads(proofs_file.read_text())) == len(before) + 1
