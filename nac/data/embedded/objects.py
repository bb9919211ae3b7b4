"""``objects`` (IID), ``objects_r`` (OOD renditions) and ``objects_novel`` (few-shot classes): the
image stand-in in the paper's accuracy regime (issue 50), as Tiny-ImageNet / Tiny-ImageNet-R are.

``shapes`` has 10 named outlines and every image model but one learns it to 97.6-100% IID, above
the effects the paper reports. Here a class is one of ``n_classes`` (200 by default, as
Tiny-ImageNet has) *object templates*: a star-shaped polygon of 5-9 vertices at random angles and
radii, drawn once from the class's own seed. An image draws its class's template with every
vertex radius jittered (``jitter``, the intra-class variation), at a random position, rotation and
size (radius ``scale`` of the image), on a textured background among up to ``clutter`` distractor
polygons (new random polygons, never a class) painted underneath in their own colours. Harder in
the ways a vision model must learn (more classes, intra-class variation, clutter, scale), not by
label noise: every image shows its class's outline whole.

- ``objects``: the ``n_classes`` templates in the ``iid`` style; splits train / val / test.
- ``objects_r``: the SAME templates (same label order: its ``n_classes``, ``jitter``, ``scale`` and
  ``template_seed`` must equal ``objects``') in the 5 ``OOD_STYLES`` of ``nac.data.embedded.drawing``,
  balanced over (class, style), without clutter; array ``style``. Splits val / test.
- ``objects_novel``: ``n_classes`` templates from another stream of ``template_seed`` (disjoint from
  ``objects``'), ``iid`` style, for few-shot episodes; splits train / val / test.

Storage and items as ``nac.data.embedded.shapes``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nac.data.embedded._base import make_rng
from nac.data.embedded.drawing import OOD_STYLES, Part, draw_parts
from nac.data.embedded.shapes import _ShapeImages
from nac.data.registry import register

NOVEL_STREAM = 1  # objects_novel's templates: template_seed's second stream (objects': the first)
DISTRACTOR_RADIUS = (0.12, 0.22)  # clutter polygons' radius, a fraction of the image side


def random_polygon(rng: np.random.Generator) -> np.ndarray:
    """A star-shaped polygon in unit coordinates: 5-9 vertices at sorted random angles, radii in
    [0.35, 1], scaled so the farthest vertex is at radius 1. float [K, 2]."""
    k = int(rng.integers(5, 10))
    angles = np.sort(rng.uniform(0, 2 * np.pi, k))
    angles = angles + np.linspace(0, 2 * np.pi, k, endpoint=False) - np.linspace(0, angles[-1], k)  # no sliver gaps
    radii = rng.uniform(0.35, 1.0, k)
    radii = radii / radii.max()
    return np.stack([radii * np.cos(angles), radii * np.sin(angles)], axis=1)


def templates(n: int, template_seed: int, stream: int = 0) -> list[np.ndarray]:
    """The ``n`` class templates of one stream of ``template_seed``; template ``i`` depends on
    ``(template_seed, stream, i)`` only, so the first classes of a larger set are the same."""
    return [random_polygon(make_rng(template_seed, 50_000 + stream, i)) for i in range(n)]


def pose_polygon(poly: np.ndarray, cx: float, cy: float, radius: float, angle: float) -> list[Part]:
    c, s = np.cos(angle), np.sin(angle)
    x = poly[:, 0] * c - poly[:, 1] * s
    y = poly[:, 0] * s + poly[:, 1] * c
    return [(np.stack([cx + radius * x, cy - radius * y], axis=1), False)]


def jittered(rng: np.random.Generator, poly: np.ndarray, jitter: float) -> np.ndarray:
    """The template with each vertex's radius scaled by ``exp(N(0, jitter))``, renormalised."""
    r = np.linalg.norm(poly, axis=1) * np.exp(rng.normal(0.0, jitter, len(poly)))
    out = poly / np.linalg.norm(poly, axis=1, keepdims=True) * r[:, None]
    return out / np.linalg.norm(out, axis=1).max()


class _ObjectImages(_ShapeImages):
    stream = 0
    with_clutter = True

    def _check(self) -> dict[str, Any]:
        p = self.params
        n, jitter, clutter, scale = p["n_classes"], p["jitter"], p["clutter"], p["scale"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ValueError(f"{self.name}: n_classes must be an int >= 2, got {n!r}")
        if not isinstance(jitter, (int, float)) or not 0 <= jitter <= 1:
            raise ValueError(f"{self.name}: jitter must be in [0, 1] (0.15 default), got {jitter!r}")
        if isinstance(clutter, bool) or not isinstance(clutter, int) or clutter < 0:
            raise ValueError(f"{self.name}: clutter must be an int >= 0 (distractors per image), got {clutter!r}")
        if not (isinstance(scale, (list, tuple)) and len(scale) == 2 and 0.1 <= scale[0] <= scale[1] <= 0.5):
            raise ValueError(f"{self.name}: scale must be [lo, hi] with 0.1 <= lo <= hi <= 0.5, got {scale!r}")
        return p

    @property
    def classes(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(f"object_{self.stream}_{i}" for i in range(self._check()["n_classes"]))

    def generate(self) -> None:
        p = self._check()
        self._templates = templates(p["n_classes"], p["template_seed"], self.stream)
        super().generate()

    def draw(self, rng: np.random.Generator, label: int, size: int, style: str) -> np.ndarray:
        p = self.params
        radius = rng.uniform(*p["scale"]) * size
        cx, cy = rng.uniform(radius, size - radius, 2)
        parts = pose_polygon(
            jittered(rng, self._templates[label], p["jitter"]), cx, cy, radius, rng.uniform(0, 2 * np.pi)
        )
        behind = []
        if self.with_clutter and style == "iid":
            for _ in range(int(rng.integers(0, p["clutter"] + 1))):
                r = rng.uniform(*DISTRACTOR_RADIUS) * size
                x, y = rng.uniform(r, size - r, 2)
                behind.append(pose_polygon(random_polygon(rng), x, y, r, rng.uniform(0, 2 * np.pi)))
        return draw_parts(rng, parts, size, style, behind)

    def info(self) -> dict[str, Any]:
        p = self._check()
        return {**super().info(), **{k: p[k] for k in ("n_classes", "jitter", "clutter", "scale", "template_seed")}}


_DEFAULTS = {"n_classes": 200, "jitter": 0.15, "clutter": 2, "scale": [0.25, 0.45], "template_seed": 0}


@register("objects")
class Objects(_ObjectImages):
    """IID objects: ``n_classes`` random-polygon templates among clutter. See the module docstring."""

    defaults = {"image_size": 32, "n_train": 5000, "n_val": 1000, "n_test": 10000, "seed": 0, **_DEFAULTS}


@register("objects_r")
class ObjectsR(_ObjectImages):
    """OOD renditions of the ``objects`` templates (same label order); ``style`` per image."""

    defaults = {"image_size": 32, "n_val": 0, "n_test": 10000, "seed": 0, **_DEFAULTS}
    styles = OOD_STYLES
    split_names = ("val", "test")
    with_clutter = False

    def info(self) -> dict[str, Any]:
        return {**super().info(), "same_classes_as": "objects"}


@register("objects_novel")
class ObjectsNovel(_ObjectImages):
    """``n_classes`` templates never in ``objects``, IID style, for few-shot episodes."""

    defaults = {"image_size": 32, "n_train": 600, "n_val": 200, "n_test": 600, "seed": 0, **_DEFAULTS, "n_classes": 20}
    stream = NOVEL_STREAM
