"""One image-track run trained and evaluated as the `train` stage does, in a scratch folder (its
checkpoint is not the pipeline's): what bench/bench_convergence.py and bench/bench_switches.py
share. It changes the working directory for the run: the library writes checkpoints under
``models/`` of the working directory (``nac.pipeline.paths``), not under a path it is given."""

from __future__ import annotations

import os
import tempfile
import time

from nac.tracks.image import evaluate_image_run, train_image_run


def train_in_scratch(params: dict, run: str, seed: int) -> tuple[dict, dict, float]:
    """``(training result, evaluation, training wall seconds)`` of ``<run>-<seed>`` under ``params``
    (whose ``data.root`` must be absolute: the run's working directory is a temporary folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            t0 = time.time()
            res = train_image_run(params, run, seed, progress=False)
            wall = time.time() - t0
            return res, evaluate_image_run(params, run, seed), wall
        finally:
            os.chdir(cwd)
