"""``.ci/run`` runs the README's test command verbatim and fails on failing or missing tests, in the
default run and in the slow one."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_ci_runs_the_readme_test_command_verbatim_then_the_slow_tests():
    commands = _readme_commands()
    test_cmd = next(c for c in commands if "python -m pytest" in c)
    assert test_cmd == "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev]' && python -m pytest"
    lines = (ROOT / ".ci/run").read_text().splitlines()
    assert test_cmd in lines, "the README's test command is not a line of .ci/run"
    assert "python -m pytest -m slow" in lines
    assert lines.index("python -m pytest -m slow") > lines.index(test_cmd)


def _check(code: int) -> subprocess.CompletedProcess:
    """The check function of .ci/run, called with a pytest exit code."""
    script = (ROOT / ".ci/run").read_text()
    body = re.search(r"^check\(\) \{.*?^\}", script, flags=re.S | re.M).group(0)
    return subprocess.run(["bash", "-c", f'{body}\ncheck "a run" {code}\necho reached'], capture_output=True, text=True)


def test_ci_check_fails_on_no_tests_and_on_failures_and_passes_on_success():
    assert _check(0).returncode == 0 and "reached" in _check(0).stdout
    no_tests = _check(5)
    assert no_tests.returncode == 1 and "collected no tests" in no_tests.stderr
    failed = _check(1)
    assert failed.returncode == 1 and "reached" not in failed.stdout
