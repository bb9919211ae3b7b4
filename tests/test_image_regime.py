"""The paper-regime image stand-in (issue 50): the package's ``objects`` is the calibrated data,
and its templates are what the calibration record says they are."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from nac.data.embedded import objects as O
from nac.pipeline.datasets import builder

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "bench/results/image_regime_calibration.json"


def _calibration():
    spec = importlib.util.spec_from_file_location("calibrate", ROOT / "bench" / "calibrate_image_regime.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_templates_are_farthest_points_nested_and_far_apart():
    small, big = O.templates(10, 0), O.templates(25, 0)
    assert all(np.array_equal(a, b) for a, b in zip(small, big))  # the first k of n are the k-set
    sigs = np.stack([O.signature(t) for t in big])
    nearest = [np.sort(O.outline_distances(sigs, j))[1] for j in range(len(big))]
    pool = [O.random_polygon(O.make_rng(0, 60_000, j)) for j in range(25)]  # 25 undrafted pool polygons
    psigs = np.stack([O.signature(t) for t in pool])
    p_nearest = [np.sort(O.outline_distances(psigs, j))[1] for j in range(25)]
    assert min(nearest) > 1.5 * np.median(p_nearest)  # chosen: far apart; drawn at random: close
    # the distance ignores rotation, start point and mirror image
    t = big[3]
    c, s = np.cos(1.1), np.sin(1.1)
    moved = np.roll(t @ np.array([[c, -s], [s, c]]).T, 2, axis=0) * [[-1, 1]]
    both = np.stack([O.signature(t), O.signature(moved[::-1])])
    assert O.outline_distances(both, 0)[1] < 0.25 * min(nearest)  # sampling offset only: far below a class gap
    with pytest.raises(ValueError, match="exceeds the template pool"):
        O.templates(O.TEMPLATE_POOL + 1, 0)


def test_the_defaults_are_the_chosen_calibration_candidate():
    rec = json.loads(RECORD.read_text())
    chosen = rec["choice"]["chosen"]
    data = rec["candidates"][chosen]["data"]
    assert rec["candidates"][chosen]["in_box"] and rec["candidates"][chosen]["templates"] == "fps"
    defaults = O.Objects.defaults
    for k in ("n_classes", "jitter", "clutter", "scale", "template_seed", "n_train", "n_val", "n_test", "image_size"):
        assert defaults[k] == data[k], k


@pytest.mark.slow  # generates the 27,000 images of the chosen candidate: about 15 s
def test_the_package_regenerates_the_calibrated_data_byte_for_byte(tmp_path):
    cal = _calibration()
    rec = json.loads(RECORD.read_text())
    chosen = rec["choice"]["chosen"]
    params, _ = cal.candidate_params(chosen, 96, str(tmp_path / "data"))
    for name in ("objects", "objects_r"):
        b = builder(params["data"], name)
        b.download()
        got = hashlib.sha256((b.raw_dir / "images.npz").read_bytes()).hexdigest()
        assert got == rec["candidates"][chosen]["raw_sha256"][name], name
