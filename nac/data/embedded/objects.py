"""``objects`` (IID), ``objects_r`` (OOD renditions) and ``objects_novel`` (few-shot classes): the
image stand-in in the paper's accuracy regime (issue 50), as Tiny-ImageNet / Tiny-ImageNet-R are.

``shapes`` has 10 named outlines and every image model but one learns it to 97.6-100% IID, above
the effects the paper reports. Here a class is one of ``n_classes`` *object templates*: star-shaped
polygons of 5-9 vertices, chosen from a pool of ``TEMPLATE_POOL`` random ones by farthest-point
sampling in a rotation- and mirror-invariant outline distance (``templates``), so classes are as
distinct as the pool allows. An image draws its class's template with every vertex radius jittered
(``jitter``, the intra-class variation), at a random position, rotation and size (radius ``scale``
of the image), on a textured background among up to ``clutter`` smaller distractor polygons (new
random polygons, never a class) painted underneath in their own colours. Harder in the ways a
vision model must learn (many classes, fine shape differences, intra-class variation, clutter,
scale), not by label noise: every image shows its class's outline whole. The defaults are the
setting chosen on Perceiver IO alone (docs/image-regime.md; bench/calibrate_image_regime.py).

- ``objects``: the ``n_classes`` templates in the ``iid`` style; splits train / val / test.
- ``objects_r``: the SAME templates (same label order: its ``n_classes``, ``jitter``, ``scale`` and
  ``template_seed`` must equal ``objects``') in the 5 ``OOD_STYLES`` of ``nac.data.embedded.drawing``,
  balanced over (class, style), without clutter; array ``style``. Splits val / test.
- ``objects_novel``: ``n_classes`` templates of another stream of ``template_seed`` (chosen among
  themselves, not against ``objects``'), ``iid`` style, for few-shot episodes; splits train / val / test.

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
TEMPLATE_POOL = 2000  # random polygons a stream's templates are chosen from (farthest-point sampling)
SIGNATURE_POINTS = 64  # points of an outline's centroid-distance signature


def random_polygon(rng: np.random.Generator) -> np.ndarray:
    """A star-shaped polygon in unit coordinates: 5-9 vertices at sorted random angles, radii in
    [0.35, 1], scaled so the farthest vertex is at radius 1. float [K, 2]."""
    k = int(rng.integers(5, 10))
    angles = np.sort(rng.uniform(0, 2 * np.pi, k))
    angles = angles + np.linspace(0, 2 * np.pi, k, endpoint=False) - np.linspace(0, angles[-1], k)  # no sliver gaps
    radii = rng.uniform(0.35, 1.0, k)
    radii = radii / radii.max()
    return np.stack([radii * np.cos(angles), radii * np.sin(angles)], axis=1)


def signature(poly: np.ndarray, m: int = SIGNATURE_POINTS) -> np.ndarray:
    """The centroid-distance signature of an outline (vertices in drawing order): ``m`` points
    equally spaced by arc length, each one's distance to their centroid, over the mean. float [m]."""
    closed = np.vstack([poly, poly[:1]])
    arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(closed, axis=0), axis=1))])
    t = np.arange(m) * arc[-1] / m
    pts = np.stack([np.interp(t, arc, closed[:, 0]), np.interp(t, arc, closed[:, 1])], axis=1)
    r = np.linalg.norm(pts - pts.mean(axis=0), axis=1)
    return r / r.mean()


def outline_distances(sigs: np.ndarray, j: int) -> np.ndarray:
    """RMS distance of signature ``j`` to every row of ``sigs``, minimised over the circular shifts
    of the row (rotation, start point) and over ``j``'s mirror image (training flips images): the
    shape distance the templates are chosen by. float [len(sigs)]."""
    m = sigs.shape[1]
    f_all = np.fft.fft(sigs, axis=1)
    sq = (sigs**2).sum(axis=1)
    best = np.full(len(sigs), np.inf)
    for s in (sigs[j], np.roll(sigs[j][::-1], 1)):
        corr = np.fft.ifft(f_all * np.conj(np.fft.fft(s))[None, :], axis=1).real.max(axis=1)
        best = np.minimum(best, np.maximum(sq + sq[j] - 2 * corr, 0.0) / m)
    return np.sqrt(best)


def templates(n: int, template_seed: int, stream: int = 0) -> list[np.ndarray]:
    """The ``n`` class templates of one stream of ``template_seed``: farthest-point sampling from
    ``TEMPLATE_POOL`` random polygons (the pool's first, then repeatedly the polygon farthest, in
    ``outline_distances``, from every one taken), so classes are as distinct as the pool allows;
    the first ``k`` of ``n`` templates are the ``k``-template set (greedy, deterministic)."""
    if n > TEMPLATE_POOL:
        raise ValueError(f"objects: n_classes={n} exceeds the template pool ({TEMPLATE_POOL}); use at most that")
    pool = [random_polygon(make_rng(template_seed, 60_000 + stream, j)) for j in range(TEMPLATE_POOL)]
    sigs = np.stack([signature(q) for q in pool])
    chosen = [0]
    nearest = outline_distances(sigs, 0)
    for _ in range(n - 1):
        j = int(np.argmax(nearest))
        chosen.append(j)
        nearest = np.minimum(nearest, outline_distances(sigs, j))
    return [pool[j] for j in chosen]


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
    ranges = {"jitter": (0, 1), "clutter": (0, None), "template_seed": (0, None), "n_classes": (2, TEMPLATE_POOL)}

    def _check(self) -> dict[str, Any]:
        p = self.params
        n, jitter, clutter, scale = p["n_classes"], p["jitter"], p["clutter"], p["scale"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ValueError(f"{self.name}: n_classes must be an int >= 2, got {n!r}")
        if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0 <= jitter <= 1:
            raise ValueError(f"{self.name}: jitter must be in [0, 1] ({_DEFAULTS['jitter']} default), got {jitter!r}")
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


# the chosen setting (docs/image-regime.md, calibration candidate f25)
_DEFAULTS = {"n_classes": 25, "jitter": 0.05, "clutter": 1, "scale": [0.35, 0.48], "template_seed": 0}


@register("objects")
class Objects(_ObjectImages):
    """IID objects: ``n_classes`` random-polygon templates among clutter. See the module docstring."""

    defaults = {"image_size": 32, "n_train": 6000, "n_val": 1000, "n_test": 10000, "seed": 0, **_DEFAULTS}


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

    defaults = {"image_size": 32, "n_train": 600, "n_val": 200, "n_test": 2000, "seed": 0, **_DEFAULTS, "n_classes": 20}
    stream = NOVEL_STREAM
