"""``shapes`` (IID), ``shapes_r`` (OOD renditions) and ``shapes_novel`` (few-shot classes).

Stand-ins for Tiny-ImageNet, Tiny-ImageNet-R and the few-shot targets: procedurally drawn
object classes (geometry in ``nac.data.embedded.drawing``) at a random position, scale (radius
30-45% of the image), rotation and colour on a textured background.

- ``shapes``: the 10 ``BASE_CLASSES`` in the ``iid`` style; splits train / val / test.
- ``shapes_r``: the SAME 10 classes (same label order) in the 5 ``OOD_STYLES`` (sketch, cartoon,
  pattern, inverted, pixelated), balanced over (class, style); array ``style`` indexes
  ``info()["styles"]``. Split test (and val when ``n_val > 0``). Evaluate a ``shapes`` model on it.
- ``shapes_novel``: the 10 ``NOVEL_CLASSES`` (disjoint from ``shapes``), ``iid`` style, for
  8-way few-shot adaptation; splits train (support pool) / val / test (query pool).

Storage: ``images`` uint8 ``[N, S, S, 3]`` (HWC), ``labels`` int64 ``[N]``. Items from ``load``:
``"input"`` uint8 ``[3, S, S]`` (CHW, 0-255; the model normalises), ``"label"`` int64 ``[]``,
and for ``shapes_r`` ``"style"`` int64 ``[]``. Labels are balanced over classes in every split.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tqdm import tqdm

from nac.data.embedded._base import (
    SPLIT_IDS,
    EmbeddedBuilder,
    ToItem,
    atomic_savez,
    balanced_labels,
    load_npz,
    split_sizes,
)
from nac.data.embedded.drawing import BASE_CLASSES, NOVEL_CLASSES, OOD_STYLES, draw_image
from nac.data.registry import register

RAW_FILE = "images.npz"


class _ShapeImages(EmbeddedBuilder):
    classes: tuple[str, ...] = BASE_CLASSES
    styles: tuple[str, ...] = ("iid",)
    split_names: tuple[str, ...] = ("train", "val", "test")
    rename = {"images": "input", "labels": "label"}
    raw_files = (RAW_FILE,)

    def _size(self) -> int:
        size = self.params["image_size"]
        if not isinstance(size, int) or size < 16:
            raise ValueError(f"{self.name}: image_size must be an int >= 16 (32 default, 64 supported), got {size!r}")
        return size

    def generate(self) -> None:
        size, n_cls, n_sty = self._size(), len(self.classes), len(self.styles)
        out: dict[str, np.ndarray] = {}
        for split, n in split_sizes(self.params, self.split_names).items():
            rng = self.rng(SPLIT_IDS[split])
            # Balanced over (class, style) pairs; with one style this is balanced over classes.
            combo = balanced_labels(rng, n, n_cls * n_sty)
            labels, styles = combo % n_cls, combo // n_cls
            images = np.empty((n, size, size, 3), dtype=np.uint8)
            for i in tqdm(range(n), desc=f"{self.name}/{split}", unit="img", leave=False):
                images[i] = self.draw(rng, int(labels[i]), size, self.styles[styles[i]])
            out[f"{split}_images"], out[f"{split}_labels"], out[f"{split}_style"] = images, labels, styles
        atomic_savez(self.raw_dir / RAW_FILE, **out)

    def draw(self, rng: np.random.Generator, label: int, size: int, style: str) -> np.ndarray:
        """One image of class ``label`` in rendition ``style``. uint8 [size, size, 3]."""
        return draw_image(rng, self.classes[label], size, style)

    def prepare(self) -> None:
        self.check_raw()
        raw = load_npz(self.raw_dir / RAW_FILE)
        keep = ("images", "labels", "style") if len(self.styles) > 1 else ("images", "labels")
        splits = {s: {k: raw[f"{s}_{k}"] for k in keep} for s in split_sizes(self.params, self.split_names)}
        self.write(splits)

    def transform(self) -> ToItem:
        return ToItem(chw=("input",))

    def info(self) -> dict[str, Any]:
        size = self._size()
        return {
            "num_classes": len(self.classes),
            "class_names": list(self.classes),
            "input_kind": "image",
            "input_shape": [3, size, size],
            "input_dtype": "uint8",
            "input_layout": "CHW, 0-255 (normalise in the model)",
            "styles": list(self.styles),
            "splits": list(split_sizes(self.params, self.split_names)),
        }


@register("shapes")
class Shapes(_ShapeImages):
    """IID shapes: 10 classes, textured backgrounds. See the module docstring."""

    defaults = {"image_size": 32, "n_train": 5000, "n_val": 1000, "n_test": 1000, "seed": 0}


@register("shapes_r")
class ShapesR(_ShapeImages):
    """OOD renditions of the ``shapes`` classes (same label order); ``style`` per image."""

    defaults = {"image_size": 32, "n_val": 0, "n_test": 1000, "seed": 0}
    styles = OOD_STYLES
    split_names = ("val", "test")

    def info(self) -> dict[str, Any]:
        return {**super().info(), "same_classes_as": "shapes"}


@register("shapes_novel")
class ShapesNovel(_ShapeImages):
    """10 classes never seen in ``shapes``, IID style, for few-shot episodes."""

    defaults = {"image_size": 32, "n_train": 600, "n_val": 200, "n_test": 600, "seed": 0}
    classes = NOVEL_CLASSES
