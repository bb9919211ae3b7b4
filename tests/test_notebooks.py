"""The notebooks in notebooks/: paired .py/.ipynb kept in sync and committed without outputs; the
execution helper (nac.report.notebooks) on tiny generated notebooks. The real notebooks are
executed by the pipeline's `notebooks` stage (smoke pipeline test)."""

from pathlib import Path

import jupytext
import nbformat
import pytest

from nac.report.notebooks import NotebookError, execute

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
SOURCES = sorted(NOTEBOOKS.glob("*.py"))


def _cells(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source) for c in nb.cells]


def test_there_are_notebooks():
    assert {p.stem for p in SOURCES} >= {"explore_circuit", "nlvr_analysis"}


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_paired_notebook_in_sync(source):
    paired = source.with_suffix(".ipynb")
    assert paired.exists(), f"{source.name} has no paired {paired.name}; run `jupytext --sync {source}`"
    script = jupytext.read(source)
    assert script.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent", (
        f"{source.name}: header must pair formats 'ipynb,py:percent'"
    )
    assert _cells(nbformat.read(paired, as_version=4)) == _cells(script), (
        f"{paired.name} differs from {source.name}; run `jupytext --sync {source}`"
    )


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_paired_notebook_has_no_outputs(source):
    nb = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, (
                f"{source.with_suffix('.ipynb').name} cell {i} carries outputs; clear them before committing"
            )


TINY = """# %% [markdown]
# # A tiny notebook

# %%
import os
import nac  # the kernel runs this interpreter, so the package imports

print("hello from", os.path.basename(os.getcwd()))
"""


def test_execute_writes_ipynb_and_html(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "tiny.py").write_text(TINY)
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    res = execute(tmp_path / "src" / "tiny.py", tmp_path / "out", cwd=workdir, timeout=60)
    assert res["name"] == "tiny" and res["seconds"] >= 0
    nb = nbformat.read(tmp_path / "out" / "tiny.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[0].outputs[0]["text"] == "hello from workdir\n"  # run in the requested directory
    assert "jupytext" not in nb.metadata or "formats" not in nb.metadata["jupytext"]
    html = (tmp_path / "out" / "tiny.html").read_text()
    assert "hello from workdir" in html and "A tiny notebook" in html
    first = (tmp_path / "out" / "tiny.ipynb").read_bytes()  # a rerun writes the same bytes (fixed cell ids)
    execute(tmp_path / "src" / "tiny.py", tmp_path / "out", cwd=workdir, timeout=60)
    assert (tmp_path / "out" / "tiny.ipynb").read_bytes() == first


def test_execute_failing_cell_names_notebook(tmp_path):
    (tmp_path / "broken.py").write_text('# %%\nx = 1\n\n# %%\nraise ValueError("boom " + str(x))\n')
    with pytest.raises(NotebookError, match=r"broken\.py") as err:
        execute(tmp_path / "broken.py", tmp_path / "out", cwd=tmp_path, timeout=60)
    assert "ValueError" in str(err.value) and "boom 1" in str(err.value)
    partial = nbformat.read(tmp_path / "out" / "broken.ipynb", as_version=4)  # kept for inspection
    assert partial.cells[1].outputs[0]["output_type"] == "error"
