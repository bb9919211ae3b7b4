"""The `converged` profile (conf/profile/converged.yaml), its kept results (results/converged/,
written by tools/run_converged.py) and their provenance (nac.provenance)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nac import provenance
from nac.compose import validate_all
from nac.pipeline.params import compose

ROOT = Path(__file__).resolve().parent.parent


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


def test_converged_is_mini_with_five_seeds_and_longer_training():
    mini, conv = compose(["profile=mini"]), compose(["profile=converged"])
    validate_all(conv)
    assert conv["profile"] == "converged" and len(conv["seeds"]) >= 5
    a, b = _flat(mini), _flat(conv)
    changed = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    tracks = ("image", "points", "listops", "text", "nlvr")
    assert changed == {"profile", "seeds"} | {f"{t}.train.epochs" for t in tracks}
    assert all(conv[t]["train"]["epochs"] > mini[t]["train"]["epochs"] for t in tracks)
    # the smoke-sized version: smoke's sizes, the converged report's rules, at least 2 seeds (paired CIs)
    small, smoke = compose(["profile=converged_smoke"]), compose(["profile=smoke"])
    validate_all(small)
    assert {k for k, v in _flat(small).items() if _flat(smoke).get(k) != v} == {"profile", "seeds"}
    assert len(small["seeds"]) >= 2


def test_committed_converged_results_match_the_committed_code_and_params():
    """The committed result set (if any) was made by this code from these params; when none is
    committed, the folder says so and the report says how to make one."""
    results = ROOT / provenance.RESULTS
    if (results / provenance.PROVENANCE).exists():
        assert provenance.check(results, ROOT) == []
    else:
        assert sorted(p.name for p in results.iterdir()) == ["README.md"]
        from nac.report.build import _converged

        assert provenance.COMMAND in _converged(results, ROOT / "reports")


def _copy_checkout(dst: Path) -> Path:
    for name in ("nac", "stages", "conf"):
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "dvc.yaml", dst / "dvc.yaml")
    return dst


def _fake_run(work: Path, profile: str = "converged_smoke") -> None:
    """What `dvc repro` leaves in the work folder, as far as the results need it."""
    (work / "params.yaml").write_text(yaml.safe_dump(compose([f"profile={profile}"], conf_dir=work / "conf")))
    (work / "metrics" / "image" / "eval").mkdir(parents=True)
    (work / "metrics" / "image" / "eval" / "perceiver_io-0.json").write_text('{"iid_acc1": 50.0}')
    (work / "metrics" / "image" / "live" / "perceiver_io-0").mkdir(parents=True)
    (work / "metrics" / "image" / "live" / "perceiver_io-0" / "metrics.json").write_text("{}")
    (work / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")


def test_provenance_passes_on_its_code_and_fails_on_a_changed_param_or_code_file(tmp_path):
    work = _copy_checkout(tmp_path / "work")
    _fake_run(work)
    out = tmp_path / "results"
    (out).mkdir()
    (out / "README.md").write_text("layout\n")
    prov = _tool().collect(out, work, "converged_smoke", [], "2026-11-24T10:00:00Z", "2026-11-24T10:05:00Z")
    assert (out / "README.md").read_text() == "layout\n"  # the layout note stays
    assert not (out / "metrics" / "image" / "live").exists() and (out / "dvc.lock").exists()
    assert set(prov) >= {"profile", "commit", "params_sha256", "code", "machine", "device", "start", "end"}
    assert provenance.check(out, work) == []

    # a param: the profile now composes to other params than the results ran
    prof = work / "conf" / "profile" / "converged_smoke.yaml"
    original = prof.read_text()
    prof.write_text(original.replace("seeds: [0, 1]", "seeds: [0, 1, 2]"))
    assert any("composed" in p for p in provenance.check(out, work))
    prof.write_text(original)
    # a code file the stages run (imported by a module a stage imports), and a stage script
    for rel in ("nac/regularizer.py", "stages/train.py"):
        f = work / rel
        code = f.read_text()
        f.write_text(code + "\n# changed\n")
        problems = provenance.check(out, work)
        assert problems and all("fingerprint" in p for p in problems), rel
        f.write_text(code)
    # the kept params themselves
    assert provenance.check(out, work) == []
    (out / "params.yaml").write_text(
        (out / "params.yaml").read_text().replace("profile: converged_smoke", "profile: x")
    )
    assert any("params_sha256" in p for p in provenance.check(out, work))
    with pytest.raises(FileNotFoundError, match="run_converged"):
        provenance.check(tmp_path / "nothing", work)


@pytest.mark.slow  # the whole pipeline at smoke's sizes with two seeds: minutes on 2 cores
def test_run_converged_smoke_end_to_end(tmp_path):
    """The documented command on the smoke-sized converged profile, in a work folder of its own:
    the results pass the provenance check against this checkout and fail once a copy's code or
    params change; the report builds their section from them."""
    out = tmp_path / "results" / "converged"
    # the pool's default workers (2 here): two jobs ending together once raced in dvclive's Live.end()
    # (tests/test_training.py::test_dvclive_log_closes_without_dvc_bookkeeping_or_a_race)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NAC_QUIET": "1"}
    cmd = [sys.executable, "tools/run_converged.py", "--profile", "converged_smoke"]
    subprocess.run([*cmd, "--workdir", str(tmp_path / "work"), "--out", str(out)], cwd=ROOT, env=env, check=True)
    prov = json.loads((out / provenance.PROVENANCE).read_text())
    assert prov["profile"] == "converged_smoke" and prov["start"] <= prov["end"]
    assert (out / "metrics" / "image" / "eval").is_dir() and (out / "graphs.json").exists()
    assert "stages" in yaml.safe_load((out / "dvc.lock").read_text())
    assert provenance.check(out, ROOT) == []
    copy = _copy_checkout(tmp_path / "copy")
    assert provenance.check(out, copy) == []
    (copy / "nac" / "model.py").write_text((copy / "nac" / "model.py").read_text() + "\n# changed\n")
    assert provenance.check(out, copy)
    # the report of the kept results, from the work folder (its data/ caches)
    from nac.report.build import _converged

    cwd = os.getcwd()
    os.chdir(tmp_path / "work")
    try:
        line = _converged(out, tmp_path / "reports")
    finally:
        os.chdir(cwd)
    assert "**converged_smoke**" in line and "Stale" not in line
    assert "claims.md" in (tmp_path / "reports" / "converged" / "README.md").read_text()
