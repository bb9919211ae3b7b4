"""The `converged` profile (conf/profile/converged.yaml) and its run in pieces: the plan and its order,
the budget, written pieces kept, stale pieces found, interrupted pieces leaving nothing half-written
(nac.converged.pieces, nac.converged.jobs, tools/run_converged.py) and the report from a
partial set of pieces (nac.report.converged)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from nac.compose import validate_all
from nac.converged import jobs as piece_jobs
from nac.converged import pieces as P
from nac.pipeline.params import compose
from nac.report.build import build_report

ROOT = Path(__file__).resolve().parent.parent
BUILD = partial(build_report, root=ROOT)  # the report as its stage builds it (bench/results/ of ROOT)


def _tool():
    spec = importlib.util.spec_from_file_location("run_converged", ROOT / "tools" / "run_converged.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


_PARAMS: dict = {}


def _params(profile: str = "converged") -> dict:
    if profile not in _PARAMS:
        _PARAMS[profile] = compose([f"profile={profile}"])
    return json.loads(json.dumps(_PARAMS[profile]))


def test_converged_is_mini_with_five_seeds_and_longer_training():
    mini, conv = compose(["profile=mini"]), _params()
    validate_all(conv)
    assert conv["profile"] == "converged" and len(conv["seeds"]) >= 5
    a, b = _flat(mini), _flat(conv)
    changed = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    tracks = ("image", "points", "listops", "text", "nlvr")
    assert changed == {"profile", "seeds"} | {f"{t}.train.epochs" for t in tracks}
    assert all(conv[t]["train"]["epochs"] > mini[t]["train"]["epochs"] for t in tracks)
    # the smoke-sized version: smoke's sizes, the converged report's rules, at least 2 seeds (paired CIs)
    small, smoke = _params("converged_smoke"), compose(["profile=smoke"])
    validate_all(small)
    assert {k for k, v in _flat(small).items() if _flat(smoke).get(k) != v} == {"profile", "seeds"}
    assert len(small["seeds"]) >= 2


def test_plan_puts_the_headline_pair_and_its_controls_first_seed_by_seed():
    params = _params()
    plan = P.plan(params)
    ids = [p.id for p in plan]
    seeds, ladder = params["seeds"], params["image"]["ladder"]
    head = f"nac-{params['prior']['name']}"
    first = [f"image/{r}-{s}" for s in seeds for r in (head, "perceiver_io", f"{head}-noreg", f"{head}-randinit")]
    assert ids[: len(first)] == first
    n_image = len(ladder) * len(seeds)
    assert all(i.startswith("image/") for i in ids[:n_image]) and ids[len(first)].endswith("-0")
    assert [i.split("/")[0] for i in ids[n_image:]] == sorted(
        (i.split("/")[0] for i in ids[n_image:]), key=["points", "listops", "text", "nlvr"].index
    )
    tracks = sum(len(params[t]["runs"]) for t in ("points", "listops", "text", "nlvr"))
    assert len(ids) == len(set(ids)) == (len(ladder) + tracks) * len(seeds)
    assert [p.id for p in P.select(plan, ["points/*-1"])] == ["points/perceiver_io-1", "points/nac-1"]
    with pytest.raises(ValueError, match="matches no piece"):
        P.select(plan, ["image/nope-*"])
    # who does what: few-shot episodes split over the seeds, pruning, the NLVR analysis
    pio = [p for p in plan if p.track == "image" and p.run == "perceiver_io"]
    eps = [e for p in pio for e in P.fewshot_episodes(params, p)]
    assert sorted(eps) == list(range(params["fewshot"]["protocol"]["episodes"]))
    assert P.fewshot_runs(params, pio[0]) == ["perceiver_io"] and P.prunes(params, pio[0])
    assert [p.id for p in plan if P.analyses(params, p)] == ["nlvr/conditional-0"]


# ---------------------------------------------------------------------------------- the runner
class FakeWork:
    """Stands in for the training: each piece takes ``minutes`` of a fake clock and writes one file;
    ``fail_on``: the piece that raises mid-way (after writing a file into its temporary folder)."""

    def __init__(self, minutes: float = 1.0, fail_on: str | None = None):
        self.t, self.minutes, self.fail_on, self.done = 1_000_000.0, minutes, fail_on, []

    def now(self) -> float:
        return self.t

    def compute(self, params, piece, out, progress=True, *, models=None):
        self.roots = (params["data"]["root"], models)
        (out / "eval.json").write_text(json.dumps({"run": piece.run, "seed": piece.seed}))
        if piece.id == self.fail_on:
            raise KeyboardInterrupt("stopped mid-piece")
        self.t += 60 * self.minutes
        self.done.append(piece.id)


@pytest.fixture
def fake(monkeypatch, tmp_path):
    tool = _tool()
    work = FakeWork()
    monkeypatch.setattr(piece_jobs, "now", work.now)
    monkeypatch.setattr(piece_jobs, "compute", work.compute)
    monkeypatch.setattr(tool, "prepare_data", lambda params, todo: None)
    monkeypatch.setenv("NAC_WORKERS", "1")  # in this process, where the fakes are
    monkeypatch.setenv("NAC_QUIET", "1")
    pieces = tmp_path / "pieces"

    def go(*argv: str):
        import argparse

        ap = argparse.Namespace(
            profile="converged",
            budget=None,
            workers=None,
            only=None,
            rerun_stale=False,
            keep_checkpoints=False,
            workdir=str(tmp_path / "work"),
            pieces=str(pieces),
            argv=list(argv),
        )
        it = iter(argv)
        for a in it:
            key = a.lstrip("-").replace("-", "_")
            if key in ("rerun_stale",):
                setattr(ap, key, True)
            elif key == "only":
                ap.only = [next(it)]
            else:
                setattr(ap, key, float(next(it)))
        return tool.run(ap, _params())

    return work, pieces, go, tool


def test_pieces_run_in_priority_order_and_a_written_piece_is_never_recomputed(fake):
    work, pieces, go, _ = fake
    go("--budget", "60", "--only", "image/*-0")
    params = _params()
    expected = [p.id for p in P.plan(params) if p.track == "image" and p.seed == 0]
    assert work.done == expected
    rec = P.read(pieces, "converged", P.Piece("image", "perceiver_io", 0))
    assert rec["wall_s"] == 60.0 and rec["device_kind"] == "CPU" and rec["files"] == ["eval.json"]
    assert set(rec) >= {"commit", "dirty", "fingerprint", "device", "start", "end", "machine", "command"}
    assert rec["fingerprint"] == P.fingerprint(ROOT, params, P.Piece("image", "perceiver_io", 0))
    work.done.clear()
    assert go("--budget", "60", "--only", "image/*-0") == [] and work.done == []  # nothing recomputed


def test_a_piece_predicted_not_to_fit_is_not_started_nor_any_after_it(fake):
    work, pieces, go, _ = fake
    go("--budget", "60", "--only", "image/nac-scale_free-0")  # one measured piece: 1 min
    work.done.clear()
    res = go("--budget", "1.5", "--only", "image/nac-scale_free-?")  # fits seed 1, not seed 2
    assert work.done == ["image/nac-scale_free-1"]
    skipped = [r for r in res if piece_jobs.SKIPPED in r]
    assert [r["id"] for r in skipped] == [f"image/nac-scale_free-{s}" for s in (2, 3, 4)]
    assert "predicted 1.0 min, 0.5 min of the budget left" in skipped[0][piece_jobs.SKIPPED]
    assert not list((pieces / "converged" / "image").glob("nac-scale_free-[234]"))
    assert not list((Path(pieces).parent / "work" / "converged").glob(".stop-*"))  # the next command starts afresh


def test_an_interrupted_piece_leaves_nothing_half_written_and_reruns_cleanly(fake):
    work, pieces, go, _ = fake
    work.fail_on = "image/perceiver_io-0"
    with pytest.raises(KeyboardInterrupt):
        go("--budget", "60", "--only", "image/*-0")
    folder = pieces / "converged" / "image"
    assert sorted(p.name for p in folder.iterdir()) == ["nac-scale_free-0"]  # the one before; no temporary folder
    work.fail_on = None
    go("--budget", "60", "--only", "image/*-0")
    assert work.done[1] == "image/perceiver_io-0" and (folder / "perceiver_io-0" / P.RECORD).is_file()
    # a write killed outright (no exception handler ran) leaves a temporary folder: cleaned, never read
    (folder / ".modfc-1.tmp-123-abc").mkdir()
    (folder / ".modfc-1.tmp-123-abc" / "eval.json").write_text("{}")
    # a replacement killed between its two renames: the complete old piece is put back
    os.replace(folder / "modfc-0", folder / ".modfc-0.old-9-x")
    P.clean_partial(pieces, "converged")
    assert not list(folder.glob(".*")) and (folder / "modfc-0" / P.RECORD).is_file()
    assert P.read(pieces, "converged", P.Piece("image", "modfc", 1)) is None


def test_write_piece_is_atomic(tmp_path):
    dest = tmp_path / "image" / "x-0"

    def bad(tmp):
        (tmp / "eval.json").write_text("{}")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        P.write_piece(dest, bad)
    assert not dest.exists() and list((tmp_path / "image").iterdir()) == []
    with pytest.raises(RuntimeError, match="without its piece.json"):
        P.write_piece(dest, lambda tmp: (tmp / "eval.json").write_text("{}"))
    P.write_piece(dest, lambda tmp: (tmp / P.RECORD).write_text('{"v": 1}'))
    P.write_piece(dest, lambda tmp: (tmp / P.RECORD).write_text('{"v": 2}'))  # a rerun replaces it whole
    assert json.loads((dest / P.RECORD).read_text()) == {"v": 2} and len(list(dest.parent.iterdir())) == 1


def test_the_work_folder_is_handed_down_as_paths_and_never_entered(tmp_path, monkeypatch):
    """No chdir: a real (smoke-sized) piece prepares its data and keeps its checkpoint in the work
    folder's data/ and models/, as the runner's pieces always did, while the working directory is
    neither changed (os.chdir refuses) nor written to."""
    import argparse

    tool = _tool()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    def refuse(path):
        raise AssertionError(f"os.chdir({path!r}): the work folder is to be handed down as paths")

    monkeypatch.setattr(os, "chdir", refuse)
    monkeypatch.setenv("NAC_WORKERS", "1")  # in this process, where os.chdir refuses
    monkeypatch.setenv("NAC_QUIET", "1")
    args = argparse.Namespace(
        profile="converged_smoke",
        budget=10.0,
        workers=None,
        only=["points/perceiver_io-0"],
        rerun_stale=False,
        keep_checkpoints=True,
        workdir=str(tmp_path / "work"),
        pieces=str(tmp_path / "pieces"),
        argv=[],
    )
    params = _params("converged_smoke")
    res = tool.run(args, params)
    assert [r["id"] for r in res] == ["points/perceiver_io-0"] and res[0]["resumed_from_checkpoint"] is False
    assert os.getcwd() == str(elsewhere) and list(elsewhere.iterdir()) == []
    work = tmp_path / "work" / "converged_smoke"
    assert (work / "models" / "points" / "perceiver_io-0.pt").is_file()
    assert (work / params["data"]["root"] / "cache" / params["points"]["dataset"]).is_dir()
    assert sorted(p.name for p in work.iterdir() if not p.name.startswith(".stop-")) == ["data", "models"]
    assert params["data"]["root"] == "data"  # the composed params are not changed (nor fingerprinted changed)
    rec = P.read(tmp_path / "pieces", "converged_smoke", P.Piece("points", "perceiver_io", 0))
    assert rec["fingerprint"] == P.fingerprint(ROOT, params, P.Piece("points", "perceiver_io", 0))


def test_the_fake_pieces_get_the_work_folders_roots(fake, monkeypatch):
    work, pieces, go, _ = fake
    monkeypatch.setattr(os, "chdir", lambda path: pytest.fail(f"os.chdir({path!r})"))
    cwd = os.getcwd()
    go("--budget", "60", "--only", "text/nac-0")
    here = pieces.parent / "work" / "converged"
    assert work.done == ["text/nac-0"] and work.roots == (str(here / "data"), here / "models")
    assert os.getcwd() == cwd


# ---------------------------------------------------------------------------------- staleness
def _checkout(dst: Path) -> Path:
    for name in ("nac", "conf"):
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def _whole(p: P.Piece, profile: str, files=("metrics.json",)) -> dict:
    """The fields that make a record whole (``P.inspect``): its folder's id, seed, profile, track and files."""
    return {"id": p.id, "seed": p.seed, "profile": profile, "track": p.track, "files": list(files)}


def _written(root: Path, code: Path, params: dict, pieces: list) -> None:
    for p in pieces:
        rec = {**_whole(p, params["profile"]), "fingerprint": P.fingerprint(code, params, p)}
        rec.update(device_kind="CPU", wall_s=1.0)

        def write(tmp, rec=rec):
            (tmp / "metrics.json").write_text("{}")
            (tmp / P.RECORD).write_text(json.dumps(rec))

        P.write_piece(p.path(root, params["profile"]), write)


def test_a_changed_param_or_nac_module_makes_exactly_its_pieces_stale(tmp_path):
    code = _checkout(tmp_path / "code")
    params = compose(["profile=converged"], conf_dir=code / "conf")
    some = [
        P.Piece("image", "perceiver_io", 0),
        P.Piece("image", "nac-scale_free", 1),
        P.Piece("points", "nac", 0),
        P.Piece("nlvr", "conditional", 0),  # the analysed one
        P.Piece("nlvr", "text_only", 0),
    ]
    root = tmp_path / "pieces"
    _written(root, code, params, some)

    def stale(conf_params=None):
        got = P.status(root, "converged", conf_params or params, code, some)
        return {p.id: why for p, st, _, why in got if st == "stale"}

    assert stale() == {}
    # a param of one track (the profile's points epochs): its pieces only
    prof = code / "conf" / "profile" / "converged.yaml"
    text = prof.read_text()
    prof.write_text(text.replace("train: {epochs: 64}", "train: {epochs: 65}"))
    assert stale(compose(["profile=converged"], conf_dir=code / "conf")) == {"points/nac-0": "params"}
    prof.write_text(text)
    # the list of runs (a rung added) and the report, docs or tests: nothing
    more = json.loads(json.dumps(params))
    more["image"]["ladder"].append("nac-scale_free-noreg")
    assert stale(more) == {}
    for rel in ("nac/report/build.py", "nac/report/claims/image.py", "nac/converged/pieces.py"):
        f = code / rel
        f.write_text(f.read_text() + "\n# changed\n")
        assert stale() == {}, rel
    # a nac module: the pieces whose job imports it
    f = code / "nac" / "tracks" / "nlvr.py"
    f.write_text(f.read_text() + "\n# changed\n")
    assert stale() == {"nlvr/conditional-0": "code"}
    f = code / "nac" / "model.py"
    f.write_text(f.read_text() + "\n# changed\n")
    assert set(stale()) == {p.id for p in some} and set(stale().values()) == {"code"}


def test_list_names_stale_pieces_and_only_rerun_stale_reruns_them(fake, monkeypatch):
    work, pieces, go, tool = fake
    go("--budget", "60", "--only", "points/*-0")
    rec = P.read(pieces, "converged", P.Piece("points", "nac", 0))
    rec["fingerprint"]["code"] = "0" * 64  # as if written by other code
    (P.Piece("points", "nac", 0).path(pieces, "converged") / P.RECORD).write_text(json.dumps(rec))
    rows = P.status(pieces, "converged", _params(), ROOT, P.select(P.plan(_params()), ["points/*-0"]))
    listed = tool.list_pieces(rows, _params(), "CPU", pieces)
    assert "points/nac-0" in listed and "stale" in listed and "its code changed (--rerun-stale reruns it)" in listed
    assert "2 pieces of profile converged: 1 done, 1 stale, 0 damaged, 0 missing" in listed
    work.done.clear()
    assert go("--budget", "60", "--only", "points/*-0") == [] and work.done == []
    go("--budget", "60", "--only", "points/*-0", "--rerun-stale")
    assert work.done == ["points/nac-0"]
    assert P.status(pieces, "converged", _params(), ROOT, [P.Piece("points", "nac", 0)])[0][1] == "done"


def test_bad_arguments_fail_with_one_line(capsys):
    tool = _tool()
    with pytest.raises(SystemExit):
        tool.main(["--only", "image/*-0"])
    assert "--budget MINUTES (> 0) is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tool.main(["--list", "--only", "nothing/*"])
    assert "matches no piece" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- the report
def _fake_image_piece(root: Path, params: dict, run: str, seed: int, acc: float, device: str) -> None:
    p = P.Piece("image", run, seed)
    files = ["eval.json", "train.json", *(["prune.json"] if P.prunes(params, p) else [])]
    rec = {
        **_whole(p, params["profile"], files),
        "fingerprint": P.fingerprint(ROOT, params, p),
        "device_kind": device,
        "wall_s": 60.0,
        "start": "2026-11-26T10:00:00Z",
        "end": "2026-11-26T10:01:00Z",
        "commit": "abc",
        "machine": "m",
    }
    ev = {"run": run, "seed": seed, "iid_acc1": acc, "iid_acc5": acc, "ood_acc1": acc, "ood_acc5": acc}

    def write(tmp):
        (tmp / "eval.json").write_text(json.dumps(ev))
        (tmp / "train.json").write_text(json.dumps({"run": run, "seed": seed, "history": []}))
        if P.prunes(params, p):
            (tmp / "prune.json").write_text("[]")
        (tmp / P.RECORD).write_text(json.dumps(rec))

    P.write_piece(p.path(root, params["profile"]), write)


def test_report_from_a_partial_set_judges_complete_claims_and_counts_the_missing_pieces(tmp_path):
    from nac.report.converged import NOT_JUDGED, section

    params = _params()
    head = f"nac-{params['prior']['name']}"
    root = tmp_path / "results" / "pieces"
    for s in params["seeds"]:  # the headline NAC on every seed, Perceiver IO on all but the last two
        _fake_image_piece(root, params, head, s, 80.0 + s, "CPU")
        if s < 3:
            _fake_image_piece(root, params, "perceiver_io", s, 70.0, "NVIDIA H100" if s == 0 else "CPU")
    line = section(tmp_path / "results", tmp_path / "reports", ROOT, build=BUILD)
    assert "8 of 105 done" in line
    claims = (tmp_path / "reports" / "converged" / "claims.md").read_text()
    row = next(r for r in claims.splitlines() if r.startswith("| iid_gain |"))
    assert f"**{NOT_JUDGED}**" in row and "2 piece(s) missing: image/perceiver_io-3, image/perceiver_io-4" in row
    assert "seed 0: CPU, NVIDIA H100" in row  # the pair of seed 0 ran on two kinds of device
    pieces_md = (tmp_path / "reports" / "converged" / "pieces.md").read_text()
    assert "105 pieces: 8 done, 0 stale, 0 damaged, 97 missing." in pieces_md
    assert "iid_gain: seed 0: CPU, NVIDIA H100" in pieces_md
    # the two missing pieces written: the claim is judged by its rule (NAC 80-84 vs 70 on every seed)
    for s in (3, 4):
        _fake_image_piece(root, params, "perceiver_io", s, 70.0, "CPU")
    section(tmp_path / "results", tmp_path / "reports", ROOT, build=BUILD)
    row = next(r for r in (tmp_path / "reports/converged/claims.md").read_text().splitlines() if "| iid_gain |" in r)
    assert "**supported**" in row and "| 10 | 0 |" in row
    # a stale piece counts as missing: its code changed
    rec_file = P.Piece("image", "perceiver_io", 4).path(root, "converged") / P.RECORD
    rec = json.loads(rec_file.read_text())
    rec["fingerprint"]["code"] = "0" * 64
    rec_file.write_text(json.dumps(rec))
    assert "(1 stale)" in section(tmp_path / "results", tmp_path / "reports", ROOT, build=BUILD)


def test_the_converged_report_judges_the_speedup_on_the_paper_size_timings_as_mini_does(tmp_path):
    """prune_speedup reads the throughput stage's metrics/costs/throughput.json (mini's report does):
    the converged report puts the checkout's copy into the pieces' metrics tree."""
    from nac.report.converged import section

    params = _params()
    head = f"nac-{params['prior']['name']}"
    root = tmp_path / "results" / "pieces"
    _fake_image_piece(root, params, head, 0, 90.0, "CPU")
    rows = [
        {"run": head, "seed": 0, "order": "connectivity", "dropped_fraction": f, "acc1": a}
        for f, a in ((0.0, 90.0), (0.5, 89.0), (0.75, 80.0))
    ]
    (P.Piece("image", head, 0).path(root, "converged") / "prune.json").write_text(json.dumps(rows))
    section(tmp_path / "results", tmp_path / "reports", ROOT, build=BUILD)
    row = next(
        r for r in (tmp_path / "reports/converged/claims.md").read_text().splitlines() if "| prune_speedup |" in r
    )
    assert "paper size:" in row and "at dropped fraction 0.5 " in row and "not measured" not in row


def test_no_pieces_no_converged_section(tmp_path):
    from nac.report.converged import section

    (tmp_path / "results").mkdir()
    assert section(tmp_path / "results", tmp_path / "reports", ROOT, build=BUILD) is None
    assert not (tmp_path / "reports").exists()


# ---------------------------------------------------------------------------------- real pieces
@pytest.mark.slow  # trains converged_smoke's pieces: about half a minute on 2 cores
def test_run_converged_smoke_end_to_end_and_an_interrupted_piece_resumes(tmp_path):
    """The documented command on the smoke-sized profile: the pieces, a second command that has
    nothing to do, an interrupted piece resumed from its checkpoint with the same result as an
    uninterrupted one, and the report from the pieces."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NAC_QUIET": "1"}
    pieces, work = tmp_path / "pieces", tmp_path / "work"
    cmd = [sys.executable, "tools/run_converged.py", "--profile", "converged_smoke", "--pieces", str(pieces)]
    cmd += ["--workdir", str(work)]
    subprocess.run([*cmd, "--budget", "10", "--workers", "2"], cwd=ROOT, env=env, check=True)
    params = _params("converged_smoke")
    rows = P.status(pieces, "converged_smoke", params, ROOT)
    assert {st for _, st, _, _ in rows} == {"done"}
    nac0 = P.Piece("image", "nac-scale_free", 0).path(pieces, "converged_smoke")
    assert sorted(p.name for p in nac0.iterdir()) == [
        "eval.json", "fewshot.json", "graph.json", "piece.json", "prune.json", "train.json"
    ]  # fmt: skip
    assert not list((work / "converged_smoke" / "models").rglob("*.pt"))  # checkpoints deleted once written
    out = subprocess.run([*cmd, "--budget", "10"], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    assert "nothing to run" in out.stdout

    # interrupted after training (its evaluation fails), then resumed: the checkpoint is reused
    cwd = os.getcwd()
    try:
        first = json.loads((nac0 / "train.json").read_text())
        shutil.rmtree(nac0)
        ctx = {
            "workdir": str(work / "converged_smoke"),
            "pieces": str(pieces),
            "code_root": str(ROOT),
            "deadline": 1e12,
            "predicted": {},
            "stop": str(tmp_path / "stop"),
            "keep_checkpoint": False,
            "commit": {"commit": None, "dirty": None},
            "command": "test",
        }
        real = piece_jobs.evaluate_image_run  # the name the piece's job calls
        piece_jobs.evaluate_image_run = lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt("killed"))
        try:
            with pytest.raises(KeyboardInterrupt):
                piece_jobs.run_piece(params, "image/nac-scale_free-0", ctx, progress=False)
        finally:
            piece_jobs.evaluate_image_run = real
        assert not nac0.exists() and not list(nac0.parent.glob(".*"))
        assert (work / "converged_smoke" / "models" / "image" / "nac-scale_free-0.pt").is_file()
        rec = piece_jobs.run_piece(params, "image/nac-scale_free-0", ctx, progress=False)
        assert rec["resumed_from_checkpoint"] is True
        assert json.loads((nac0 / "train.json").read_text())["history"] == first["history"]
        from nac.report.converged import section

        line = section(pieces.parent, tmp_path / "reports", ROOT, "converged_smoke", build=BUILD)
    finally:
        moved = os.getcwd() != cwd
    assert not moved  # the work folder is handed down as paths, never entered
    assert f"{len(rows)} of {len(rows)} done (0 stale)" in line
    assert (tmp_path / "reports" / "converged" / "tables").is_dir()  # the whole report once complete


def test_fewshot_on_the_episodes_of_one_seed_gives_the_full_runs_rows(tiny_config):
    """A piece adapts its own model on the episodes its seed serves (episode e: model e % seeds);
    together the pieces' rows are the few-shot stage's, row for row."""
    import torch

    from nac.registry import build_model
    from nac.tracks.fewshot import FewShotConfig, run_fewshot

    class Target:
        def __init__(self):
            g = torch.Generator().manual_seed(0)
            item = lambda i: {
                "input": torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8, generator=g),
                "label": i % 4,
            }  # noqa: E731
            self.splits = {s: [item(i) for i in range(24)] for s in ("train", "test")}

        def load(self, split):
            return self.splits[split]

    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        models.append(build_model(tiny_config(num_classes=10)).eval())
    cfg = FewShotConfig(ways=3, shots=[1, 2], episodes=3, queries_per_class=3, steps=2)
    target = {"t": Target()}
    full = run_fewshot({"nac": models}, target, cfg, progress=False, seed=5)
    parts = []
    for i, m in enumerate(models):
        eps = [e for e in range(cfg.episodes) if e % len(models) == i]
        parts += run_fewshot({"nac": [m] * len(models)}, target, cfg, progress=False, seed=5, episodes=eps)
    key = lambda r: (r["episode"], r["shots"])  # noqa: E731
    assert len(full) == 6 and sorted(parts, key=key) == sorted(full, key=key)


def test_committed_pieces_are_whole():
    """Every committed piece folder (the live run's and the records') holds its record; no temporary
    folder of a write is committed."""
    roots = [ROOT / P.PIECES, *(d / "pieces" for d in (ROOT / "results/converged/records").glob("*"))]
    assert any(r.is_dir() for r in roots), "no committed pieces at all (results/converged/)"
    for root in roots:
        assert not [p for p in root.rglob(".*")], "a temporary folder of an interrupted write is committed"
        for d in root.glob("*/*/*"):
            rec = json.loads((d / P.RECORD).read_text())
            assert rec["id"] == f"{d.parent.name}/{d.name}" and set(rec["files"]) <= {f.name for f in d.iterdir()}
