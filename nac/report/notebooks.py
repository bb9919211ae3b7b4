"""Executed notebooks: every jupytext percent-format ``notebooks/<name>.py`` is converted to a
notebook (jupytext), run top to bottom in a fresh kernel (nbclient) with the repository root as
working directory, and written as ``<out>/<name>.ipynb`` (with outputs) and ``<out>/<name>.html``
(nbconvert). The kernel is ipykernel's ``python3`` for *this* interpreter, whatever kernelspecs
are installed elsewhere, and inherits this process's environment (``PYTHONPATH`` included).

A failing cell stops the run with :class:`NotebookError`, naming the notebook and carrying
nbclient's ``CellExecutionError`` (the cell's source and traceback; likewise a cell over the
timeout or a dead kernel); the partially executed notebook is still written, so its outputs up to
the error can be inspected.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jupytext
import nbformat
import zmq
from ipykernel.kernelspec import RESOURCES, get_kernel_dict
from jupyter_client import AsyncKernelManager
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from nbconvert import HTMLExporter
from nbconvert.filters import strip_ansi

KERNEL = "python3"


class NotebookError(RuntimeError):
    """A notebook cell raised (or timed out); the message names the notebook."""


class _ThisInterpreter(KernelSpecManager):
    """Kernelspecs resolved to ipykernel's spec for ``sys.executable``, never a stray install."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(resource_dir=RESOURCES, **get_kernel_dict())


def execute(source: str | Path, out_dir: str | Path, cwd: str | Path = ".", timeout: int = 600) -> dict:
    """Run one percent-format notebook; returns ``{"name", "ipynb", "html", "seconds"}`` (the
    execution time, kernel start included).

    ``cwd``: the kernel's working directory (relative paths in the notebook resolve there);
    ``timeout``: seconds allowed per cell. Raises :class:`NotebookError` if a cell fails.
    """
    source, out_dir = Path(source), Path(out_dir)
    name = source.stem
    nb = jupytext.read(source)
    nb.metadata.get("jupytext", {}).pop("formats", None)  # the executed copy is not paired with a script
    for i, cell in enumerate(nb.cells):  # jupytext draws random cell ids; fixed ones keep reruns byte-identical
        cell["id"] = f"{name[:50]}-{i}"
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3 (ipykernel)", "language": "python"}
    km = AsyncKernelManager(kernel_name=KERNEL, kernel_spec_manager=_ThisInterpreter())
    if km.has_trait("transport_encryption") and zmq.has("curve"):  # CurveZMQ where this jupyter_client offers it
        km.transport_encryption = "auto"
    client = NotebookClient(
        nb,
        km=km,
        timeout=timeout,
        kernel_name=KERNEL,
        record_timing=False,
        resources={"metadata": {"path": str(Path(cwd).resolve())}},
    )
    start = time.perf_counter()
    try:
        client.execute(cleanup_kc=True)  # shut the kernel down even though we made its manager
    except CellExecutionError as e:  # the message holds the cell's source and traceback
        _write(nb, out_dir, name)
        raise NotebookError(
            f"notebook {source} failed (partial output in {out_dir / name}.ipynb):\n{strip_ansi(str(e))}"
        ) from e
    except (CellTimeoutError, DeadKernelError) as e:  # a cell over `timeout` s, or the kernel died
        _write(nb, out_dir, name)
        raise NotebookError(
            f"notebook {source} failed (timeout per cell {timeout} s): {type(e).__name__}: {strip_ansi(str(e))}"
        ) from e
    seconds = time.perf_counter() - start
    return {"name": name, **_write(nb, out_dir, name), "seconds": round(seconds, 2)}


def _write(nb: nbformat.NotebookNode, out_dir: Path, name: str) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    ipynb, html = out_dir / f"{name}.ipynb", out_dir / f"{name}.html"
    nbformat.write(nb, ipynb)
    body, _ = HTMLExporter().from_notebook_node(nb, resources={"metadata": {"name": name}})  # <title>
    html.write_text(body, encoding="utf-8")
    return {"ipynb": str(ipynb), "html": str(html)}


def execute_all(
    src_dir: str | Path = "notebooks",
    out_dir: str | Path = "reports/notebooks",
    cwd: str | Path = ".",
    timeout: int = 600,
) -> list[dict]:
    """Execute every ``<src_dir>/*.py`` (see :func:`execute`), up to one kernel per CPU core at
    a time (the notebooks are independent; each runs in its own kernel either way); results in
    name order. The first failing notebook's :class:`NotebookError` is raised once all have run."""
    sources = sorted(Path(src_dir).glob("*.py"))
    if not sources:
        raise FileNotFoundError(f"no percent-format notebooks (*.py) in {src_dir}")
    with ThreadPoolExecutor(max_workers=max(1, min(len(sources), os.cpu_count() or 1))) as pool:
        futures = [pool.submit(execute, s, out_dir, cwd, timeout) for s in sources]
    return [f.result() for f in futures]
