"""Records (issue 50, item 6): a finished converged run kept readable after its benchmark changes
(``nac.converged.records``, ``tools/run_converged.py --archive``, ``nac.report.converged.record_section``)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from nac.converged import pieces as P
from nac.converged import records as R
from nac.pipeline.params import compose

ROOT = Path(__file__).resolve().parent.parent
PROFILE = "converged_smoke"
ABOUT = {
    "title": "benchmark 1 (shapes, 10 classes)",
    "could_show": "the mechanism and the few-shot gaps.",
    "could_not_show": "IID gaps of the paper's size (saturated at 97.6-100%).",
}


@pytest.fixture(scope="module")
def params() -> dict:
    return compose([f"profile={PROFILE}"])


def _write_all(results: Path, params: dict, skip: int = 0) -> list[P.Piece]:
    """Every piece of the profile written whole (its metrics files and its record), under this code."""
    plan = P.plan(params)
    for p in plan[skip:]:
        files = ["train.json", "eval.json", *(["prune.json"] if P.prunes(params, p) else [])]
        files = files if p.track == "image" else ["metrics.json"]
        rec = {
            "id": p.id,
            "seed": p.seed,
            "profile": PROFILE,
            "track": p.track,
            "files": files,
            "fingerprint": P.fingerprint(ROOT, params, p),
            "device_kind": "CPU",
            "wall_s": 1.0,
            "commit": "abc1234",
        }

        def write(tmp, rec=rec, run=p.run, seed=p.seed):
            acc = {k: 50.0 + seed for k in ("iid_acc1", "iid_acc5", "ood_acc1", "ood_acc5", "test_acc1", "val_acc1")}
            body = {
                "prune.json": [],
                "train.json": {"run": run, "seed": seed, "history": []},
                "eval.json": {"run": run, "seed": seed, **acc},
                "metrics.json": {"run": run, "seed": seed, "history": [], **acc, "test_chance": 10.0, "test_n": 100},
            }
            for name in rec["files"]:
                (tmp / name).write_text(json.dumps(body[name]))
            (tmp / P.RECORD).write_text(json.dumps(rec))

        P.write_piece(p.path(results / "pieces", PROFILE), write)
    return plan


@pytest.fixture
def clean_git(monkeypatch):
    monkeypatch.setattr(R, "_commit", lambda root: ("f" * 40, False))


def test_only_a_whole_run_of_a_clean_checkout_is_archived_and_nothing_moves_otherwise(
    tmp_path, params, clean_git, monkeypatch
):
    results = tmp_path / "results"
    plan = _write_all(results, params, skip=1)  # the first piece missing
    with pytest.raises(R.RecordError, match=r"only a whole run .* 1 of 42 pieces .* not done: " + plan[0].id):
        R.archive(results, PROFILE, "benchmark1", params, ROOT, ABOUT)
    _write_all(results, params)
    for bad in ("Benchmark 1", "../x", ""):
        with pytest.raises(R.RecordError, match="lower-case letters"):
            R.archive(results, PROFILE, bad, params, ROOT, ABOUT)
    monkeypatch.setattr(R, "_commit", lambda root: ("f" * 40, True))
    with pytest.raises(R.RecordError, match="uncommitted changes"):
        R.archive(results, PROFILE, "benchmark1", params, ROOT, ABOUT)
    assert not R.records_root(results).exists() and len(list((results / "pieces" / PROFILE).rglob(P.RECORD))) == 42


def test_an_archived_run_is_read_with_its_own_params_and_never_goes_stale(tmp_path, params, clean_git):
    results = tmp_path / "results"
    plan = _write_all(results, params)
    (results / "gpu_proof.json").write_text("[]")  # the GPU path's proof is of these pieces: it moves with them
    dest = R.archive(results, PROFILE, "benchmark1", params, ROOT, ABOUT)
    assert dest == results / "records" / "benchmark1" and not (results / "pieces" / PROFILE).exists()
    assert (dest / "gpu_proof.json").is_file() and not (results / "gpu_proof.json").exists()
    rec = R.read(dest)
    assert (
        rec["params"] == params and rec["pieces"] == 42 and rec["commit"] == "f" * 40 and rec["title"] == ABOUT["title"]
    )
    with pytest.raises(R.RecordError, match="exists"):  # never overwritten
        R.archive(results, PROFILE, "benchmark1", params, ROOT, ABOUT)
    # the code of the day changed under every piece: a live run would be stale, a record is not
    for f in dest.rglob(P.RECORD):
        piece = json.loads(f.read_text())
        piece["fingerprint"] = {"code": "0" * 64, "params": "0" * 64}
        f.write_text(json.dumps(piece))
    assert {st for _, st, _, _ in R.status(dest, rec)} == {"done"}
    # a damaged piece is named as such
    (plan[1].path(dest / "pieces", PROFILE) / "eval.json").unlink()
    rows = {p.id: (st, why) for p, st, _, why in R.status(dest, rec)}
    assert rows[plan[1].id] == ("damaged", "eval.json: listed in piece.json, absent")
    assert R.all_records(results) == [dest]


def test_the_report_builds_a_record_under_records_with_what_it_could_and_could_not_show(tmp_path, params, clean_git):
    from nac.report.build import build_report
    from nac.report.converged import record_section, section

    build = partial(build_report, root=ROOT)  # the report as its stage builds it (bench/results/ of ROOT)

    results = tmp_path / "results"
    plan = _write_all(results, params)
    dest = R.archive(results, PROFILE, "benchmark1", params, ROOT, ABOUT)
    import shutil

    keep = next(p for p in plan if p.track == "points")
    for p in plan:  # pieces lost from the record: no whole report, the claims that read them wait
        if p != keep:
            shutil.rmtree(p.path(dest / "pieces", PROFILE))
    out = tmp_path / "reports"
    assert section(results, out, ROOT, PROFILE, build=build) is None  # no live run of the profile any more
    line = record_section(dest, out, ROOT, build=build)
    assert line.startswith(f"**Record: {ABOUT['title']}** (1 of 42 pieces whole")
    assert ABOUT["could_not_show"] in line and "records/benchmark1/README.md" in line
    page = out / "records" / "benchmark1"
    for name in ("README.md", "claims.md", "pieces.md"):
        text = (page / name).read_text()
        assert "The record of an earlier benchmark: benchmark 1" in text and ABOUT["could_show"] in text, name
    assert "damaged or missing" in (page / "README.md").read_text()
    assert "42 pieces: 1 done, 0 stale, 0 damaged, 41 missing." in (page / "pieces.md").read_text()


def test_a_bad_record_or_about_file_is_one_clear_error(tmp_path):
    d = tmp_path / "records" / "benchmark1"
    d.mkdir(parents=True)
    (d / R.ABOUT).write_text("{not json")
    with pytest.raises(R.RecordError, match="cannot read the record"):
        R.read(d)
    (d / R.ABOUT).write_text(json.dumps({"name": "benchmark1"}))
    with pytest.raises(R.RecordError, match="not a record .*missing title"):
        R.read(d)
    (d / R.ABOUT).write_text(
        json.dumps(
            {"name": "other", **ABOUT, "profile": "p", "pieces": 1, "commit": "c", "archived": "t", "params": {}}
        )
    )
    with pytest.raises(R.RecordError, match="names record 'other', its folder is 'benchmark1'"):
        R.read(d)
    about = tmp_path / "about.yaml"
    about.write_text("title: x\ncould_show: ''\nwhat: y\n")
    with pytest.raises(R.RecordError, match=r"missing or empty: could_show, could_not_show\); unknown keys: what"):
        R.read_about(about)
    about.write_text("- a list\n")
    with pytest.raises(R.RecordError, match="must be a mapping"):
        R.read_about(about)
    with pytest.raises(R.RecordError, match="cannot read it"):
        R.read_about(tmp_path / "absent.yaml")


def test_archive_and_about_go_together_on_the_command_line(capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_converged", ROOT / "tools" / "run_converged.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    with pytest.raises(SystemExit) as e:
        tool.main(["--archive", "benchmark1"])
    assert e.value.code == 2 and "--archive NAME and --about FILE go together" in capsys.readouterr().err
