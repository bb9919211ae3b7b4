"""``digits``: scikit-learn's bundled handwritten digits (real data, 1797 images, 10 classes), a
few-shot target (8-way episodes), offline.

``download()`` copies ``sklearn.datasets.load_digits`` (8x8 greyscale, ink 0-16) to
``<raw>/digits.npz``. ``prepare()`` maps 0-16 to 0-255, resizes to ``image_size`` (bilinear,
PIL), repeats the channel three times and splits stratified by class with a seeded permutation:
per class ``round(test_fraction * n)`` test, ``round(val_fraction * n)`` val, the rest train.

Storage: ``images`` uint8 ``[N, S, S, 3]``, ``labels`` int64 ``[N]``. Items: ``"input"`` uint8
``[3, S, S]`` (CHW, 0-255, white ink on black), ``"label"`` int64 ``[]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image

from nac.data.embedded._base import EmbeddedBuilder, ToItem, atomic_savez, load_npz
from nac.data.registry import register

RAW_FILE = "digits.npz"


@register("digits")
class Digits(EmbeddedBuilder):
    """Handwritten digits 0-9 at ``image_size`` px, three channels. See the module docstring."""

    defaults = {"image_size": 32, "val_fraction": 0.1, "test_fraction": 0.5, "seed": 0}
    rename = {"images": "input", "labels": "label"}
    raw_files = (RAW_FILE,)
    raw_param_keys = ()  # the raw file is sklearn's data, whatever the params

    def generate(self) -> None:
        from sklearn.datasets import load_digits  # deferred: ~0.9 s, every stage imports this builder (registry)

        d = load_digits()
        atomic_savez(self.raw_dir / RAW_FILE, images=d.images.astype(np.uint8), labels=d.target.astype(np.int64))

    def _split_indices(self, labels: np.ndarray) -> dict[str, np.ndarray]:
        vf, tf = float(self.params["val_fraction"]), float(self.params["test_fraction"])
        if vf < 0 or tf < 0 or vf + tf >= 1:
            raise ValueError(f"digits: need val_fraction, test_fraction >= 0 with sum < 1, got {vf}, {tf}")
        rng = self.rng(0)
        parts: dict[str, list[np.ndarray]] = {"train": [], "val": [], "test": []}
        for c in range(10):
            idx = rng.permutation(np.flatnonzero(labels == c))
            n_test, n_val = int(round(tf * len(idx))), int(round(vf * len(idx)))
            parts["test"].append(idx[:n_test])
            parts["val"].append(idx[n_test : n_test + n_val])
            parts["train"].append(idx[n_test + n_val :])
        return {s: rng.permutation(np.concatenate(v)) for s, v in parts.items() if sum(map(len, v))}

    def prepare(self) -> None:
        self.check_raw()
        raw = load_npz(self.raw_dir / RAW_FILE)
        size = self._size()
        grey = np.round(raw["images"].astype(np.float64) * (255 / 16)).astype(np.uint8)
        big = np.stack([np.asarray(Image.fromarray(g).resize((size, size), Image.BILINEAR)) for g in grey])
        images = np.repeat(big[..., None], 3, axis=-1)
        splits = {
            s: {"images": images[i], "labels": raw["labels"][i]} for s, i in self._split_indices(raw["labels"]).items()
        }
        self.write(splits)

    def _size(self) -> int:
        size = self.params["image_size"]
        if not isinstance(size, int) or size < 8:
            raise ValueError(f"digits: image_size must be an int >= 8, got {size!r}")
        return size

    def transform(self) -> ToItem:
        return ToItem(chw=("input",))

    def info(self) -> dict[str, Any]:
        size = self._size()
        return {
            "num_classes": 10,
            "class_names": [str(i) for i in range(10)],
            "input_kind": "image",
            "input_shape": [3, size, size],
            "input_dtype": "uint8",
            "input_layout": "CHW, 0-255 (normalise in the model)",
            "source": "sklearn.datasets.load_digits (UCI optical recognition of handwritten digits)",
        }
