"""One image-track run trained and evaluated as the `train` stage does, with its checkpoint in a
scratch folder (not the pipeline's ``models/``): what bench/bench_convergence.py and
bench/bench_switches.py share."""

from __future__ import annotations

import tempfile
import time

from nac.pipeline.schema_models import section
from nac.tracks.image import evaluate_image_run, train_image_run


def train_in_scratch(params: dict, run: str, seed: int) -> tuple[dict, dict, float]:
    """``(training result, evaluation, training wall seconds)`` of ``<run>-<seed>`` under ``params``,
    its checkpoint under a temporary ``models`` root deleted afterwards."""
    with tempfile.TemporaryDirectory() as models:
        t0 = time.time()
        image, data, device = section(params, "image"), params["data"], params.get("device", "auto")
        res = train_image_run(image, run, seed, False, data=data, device=device, models=models)
        wall = time.time() - t0
        return res, evaluate_image_run(image, run, seed, data=data, device=device, models=models), wall
