"""Issue 36, case 9: the committed run's environment is recorded (``requirements.lock``), a run in
another environment says so in one line at its start, and the report compares the run with the
committed one (``reports/reproduction.md``)."""

from __future__ import annotations

from pathlib import Path

from nac import environment

ROOT = Path(__file__).resolve().parents[1]


def test_the_lock_pins_every_package_of_the_committed_run_but_nac():
    """On the old checkout there was no lock: nothing said which torch produced the committed numbers."""
    pins = environment.read_lock(ROOT / "requirements.lock")
    assert {"torch", "numpy", "dvc", "scipy"} <= set(pins) and "nac" not in pins
    assert all(v and " " not in v for v in pins.values())


def test_a_differing_environment_says_which_packages_in_one_line(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("# header\ntorch==2.15.0\nnumpy==2.1.0\nscipy==1.14.0\n", encoding="utf-8")
    have = {"torch": "2.14.1", "numpy": "2.1.0", "pandas": "2.2.0"}
    line = environment.mismatch_line(lock, have)
    assert line is not None and "\n" not in line
    assert line.startswith("environment: 3 package(s) differ from requirements.lock")
    assert "torch 2.14.1 (locked 2.15.0)" in line and "scipy missing (locked 1.14.0)" in line
    assert "pandas 2.2.0 (not locked)" in line and "pip install -r requirements.lock" in line
    assert environment.mismatch_line(lock, {"torch": "2.15.0", "numpy": "2.1.0", "scipy": "1.14.0"}) is None
    assert environment.mismatch_line(tmp_path / "none.lock", have) is None  # no lock: nothing to compare


def test_installed_names_every_distribution_but_nac_and_pip():
    have = environment.installed()
    assert "torch" in have and "nac" not in have and "pip" not in have


def test_a_stage_says_the_environment_differs_at_its_start(tmp_path, monkeypatch, capsys):
    """``load_params`` (every stage's first step) prints the mismatch line once per process."""
    from nac.pipeline import params as params_mod

    lock = tmp_path / "requirements.lock"
    lock.write_text("torch==0.0.1\n", encoding="utf-8")
    monkeypatch.setattr(environment, "LOCK", lock)
    params_mod._say_environment.cache_clear()  # this process has not said it yet
    monkeypatch.delenv("NAC_QUIET", raising=False)
    monkeypatch.chdir(ROOT)
    params_mod.load_params()
    params_mod.load_params()
    err = capsys.readouterr().err
    params_mod._say_environment.cache_clear()  # the next test's process state: not said
    assert err.count("environment: ") == 1 and "(locked 0.0.1)" in err
