"""Procedural drawing of the shape classes, shared by ``shapes``, ``shapes_r``, ``shapes_novel``
and ``nlvr_shapes``: the one place where a class's geometry is defined.

A class is a list of *parts*: closed polygons in unit coordinates (y up, every point inside the
unit disk, scaled so the farthest point is at radius 1), each either filled or a hole cut out of
what was filled before it. ``place`` poses the parts in pixel coordinates (centre, radius,
rotation); ``fill_mask`` / ``stroke_mask`` rasterise them with PIL at 4x supersampling (so edges
are anti-aliased) into float masks ``[S, S]`` in [0, 1]; ``draw_image`` composes a whole image
``uint8 [S, S, 3]`` in one rendition style:

- ``iid``: flat-coloured shape (mild shading) on a textured background (gradient, value noise,
  stripes, checkerboard or speckle) -- the training distribution;
- the OOD renditions of ``shapes_r`` (as ImageNet-R is to ImageNet): ``sketch`` (jittery dark
  outline on paper), ``cartoon`` (saturated flat fill, thick black outline, pastel background),
  ``pattern`` (fill of stripes / checks / dots), ``inverted`` (an iid image with colours
  inverted), ``pixelated`` (an iid image at a third of the resolution, blown up).

Classes differ by outline only (colours are drawn independently of the class), so every
rendition tests shape recognition.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

Part = tuple[np.ndarray, bool]  # (points [K, 2] unit coordinates, is_hole)
SUPERSAMPLE = 4


def _arc(a0: float, a1: float, r: float = 1.0, c: tuple[float, float] = (0.0, 0.0), n: int = 48) -> np.ndarray:
    t = np.linspace(a0, a1, n)
    return np.stack([c[0] + r * np.cos(t), c[1] + r * np.sin(t)], axis=1)


def _ngon(n: int, r: float = 1.0, phase: float = np.pi / 2) -> np.ndarray:
    return _arc(phase, phase + 2 * np.pi, r, n=n + 1)[:-1]


def _circle(r: float = 1.0) -> np.ndarray:
    return _ngon(64, r, 0.0)


def _star(points: int, inner: float) -> np.ndarray:
    t = np.pi / 2 + np.pi * np.arange(2 * points) / points
    r = np.where(np.arange(2 * points) % 2 == 0, 1.0, inner)
    return np.stack([r * np.cos(t), r * np.sin(t)], axis=1)


def _poly(*xy: tuple[float, float]) -> np.ndarray:
    return np.asarray(xy, dtype=np.float64)


def _heart() -> np.ndarray:
    t = np.linspace(0, 2 * np.pi, 72, endpoint=False)
    x = 16 * np.sin(t) ** 3
    y = 13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t)
    return np.stack([x, y + 2.5], axis=1)


def _crescent() -> np.ndarray:
    # Unit disk minus a disk of radius r2 centred at (d, 0): outer arc, then the inner arc back.
    d, r2 = 0.55, 0.85
    x0 = (1 - r2**2 + d**2) / (2 * d)
    y0 = np.sqrt(1 - x0**2)
    phi, psi = np.arctan2(y0, x0), np.arctan2(y0, x0 - d)
    outer = _arc(phi, 2 * np.pi - phi)
    inner = _arc(2 * np.pi - psi, psi, r2, (d, 0.0))
    return np.concatenate([outer, inner[1:-1]]) + [0.35, 0.0]


def _teardrop() -> np.ndarray:
    r, c = 0.55, (0.0, -0.4)
    beta = np.arccos(r / (1.0 - c[1]))  # angle at the centre between the tip and a tangent point
    return np.concatenate([[[0.0, 1.0]], _arc(np.pi / 2 + beta, 2.5 * np.pi - beta, r, c)])


_GEOMETRY: dict[str, list[Part]] = {
    # ---- classes of `shapes` / `shapes_r` ----
    "circle": [(_circle(), False)],
    "square": [(_ngon(4, phase=np.pi / 4), False)],
    "triangle": [(_ngon(3), False)],
    "star": [(_star(5, 0.42), False)],
    "cross": [
        (
            _poly(
                (-0.3, 1),
                (0.3, 1),
                (0.3, 0.3),
                (1, 0.3),
                (1, -0.3),
                (0.3, -0.3),
                (0.3, -1),
                (-0.3, -1),
                (-0.3, -0.3),
                (-1, -0.3),
                (-1, 0.3),
                (-0.3, 0.3),
            ),
            False,
        )
    ],
    "hexagon": [(_ngon(6, phase=0.0), False)],
    "heart": [(_heart(), False)],
    "arrow": [(_poly((-1, -0.28), (0.1, -0.28), (0.1, -0.7), (1, 0), (0.1, 0.7), (0.1, 0.28), (-1, 0.28)), False)],
    "crescent": [(_crescent(), False)],
    "ring": [(_circle(), False), (_circle(0.55), True)],
    # ---- classes of `shapes_novel` (never in `shapes`) ----
    "semicircle": [(_arc(0, np.pi) - [0, 0.42], False)],
    "l_shape": [(_poly((-0.7, 1), (-0.2, 1), (-0.2, -0.5), (0.7, -0.5), (0.7, -1), (-0.7, -1)), False)],
    "t_shape": [
        (_poly((-0.9, 1), (0.9, 1), (0.9, 0.5), (0.25, 0.5), (0.25, -1), (-0.25, -1), (-0.25, 0.5), (-0.9, 0.5)), False)
    ],
    "hourglass": [(_poly((-0.75, 1), (0.75, 1), (0.12, 0), (0.75, -1), (-0.75, -1), (-0.12, 0)), False)],
    "pacman": [(np.concatenate([[[0.0, 0.0]], _arc(np.pi / 5, 2 * np.pi - np.pi / 5)]), False)],
    "teardrop": [(_teardrop(), False)],
    "frame": [(_ngon(4, phase=np.pi / 4), False), (_ngon(4, 0.6, np.pi / 4), True)],
    "chevron": [(_poly((-1, -0.2), (0, 0.8), (1, -0.2), (1, -0.75), (0, 0.25), (-1, -0.75)), False)],
    "trapezoid": [(_poly((-1, -0.6), (1, -0.6), (0.45, 0.6), (-0.45, 0.6)), False)],
    "diamond": [(_poly((0, 1), (0.5, 0), (0, -1), (-0.5, 0)), False)],
}


def _normalise(parts: list[Part]) -> list[Part]:
    scale = max(np.linalg.norm(p, axis=1).max() for p, _ in parts)
    return [(p / scale, hole) for p, hole in parts]


GEOMETRY: dict[str, list[Part]] = {k: _normalise(v) for k, v in _GEOMETRY.items()}
BASE_CLASSES: tuple[str, ...] = (
    "circle",
    "square",
    "triangle",
    "star",
    "cross",
    "hexagon",
    "heart",
    "arrow",
    "crescent",
    "ring",
)
NOVEL_CLASSES: tuple[str, ...] = (
    "semicircle",
    "l_shape",
    "t_shape",
    "hourglass",
    "pacman",
    "teardrop",
    "frame",
    "chevron",
    "trapezoid",
    "diamond",
)
OOD_STYLES: tuple[str, ...] = ("sketch", "cartoon", "pattern", "inverted", "pixelated")
STYLES: tuple[str, ...] = ("iid",) + OOD_STYLES


# ---- geometry -> pixels ------------------------------------------------------------------
def place(name: str, cx: float, cy: float, radius: float, angle: float) -> list[Part]:
    """The parts of class ``name`` in pixel coordinates (x right, y down), rotated by ``angle``."""
    if name not in GEOMETRY:
        raise KeyError(f"unknown shape class {name!r}; known: {sorted(GEOMETRY)}")
    c, s = np.cos(angle), np.sin(angle)
    out = []
    for p, hole in GEOMETRY[name]:
        x = p[:, 0] * c - p[:, 1] * s
        y = p[:, 0] * s + p[:, 1] * c
        out.append((np.stack([cx + radius * x, cy - radius * y], axis=1), hole))
    return out


def _downsample(img: Image.Image, size: int) -> np.ndarray:
    return np.asarray(img.reduce(SUPERSAMPLE), dtype=np.float32) / 255.0  # box filter


def _pts(p: np.ndarray) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in p * SUPERSAMPLE]


def fill_mask(parts: list[Part], size: int) -> np.ndarray:
    """Anti-aliased coverage of the filled parts minus the holes. float32 [size, size] in [0, 1]."""
    img = Image.new("L", (size * SUPERSAMPLE,) * 2, 0)
    draw = ImageDraw.Draw(img)
    for p, hole in parts:
        draw.polygon(_pts(p), fill=0 if hole else 255)
    return _downsample(img, size)


def draw_flat(items: list[tuple[list[Part], np.ndarray]], size: int, bg: np.ndarray) -> np.ndarray:
    """Flat-coloured shapes (``(parts, rgb in [0, 1])`` painted in order) on a plain background,
    anti-aliased in one supersampled pass. uint8 [size, size, 3]."""
    rgb = lambda c: tuple(int(round(255 * float(v))) for v in c)  # noqa: E731
    img = Image.new("RGB", (size * SUPERSAMPLE,) * 2, rgb(bg))
    draw = ImageDraw.Draw(img)
    for parts, colour in items:
        for p, hole in parts:
            draw.polygon(_pts(p), fill=rgb(bg) if hole else rgb(colour))
    return np.asarray(img.reduce(SUPERSAMPLE), dtype=np.uint8).copy()


def stroke_mask(parts: list[Part], size: int, width: float) -> np.ndarray:
    """Anti-aliased outline of every part, ``width`` pixels wide. float32 [size, size] in [0, 1]."""
    img = Image.new("L", (size * SUPERSAMPLE,) * 2, 0)
    draw = ImageDraw.Draw(img)
    w = max(1, int(round(width * SUPERSAMPLE)))
    for p, _ in parts:
        pts = _pts(np.concatenate([p, p[:1]]))
        draw.line(pts, fill=255, width=w, joint="curve")
    return _downsample(img, size)


# ---- colours and textures (all float32 in [0, 1]) -----------------------------------------
def _grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    return np.meshgrid(np.arange(size, dtype=np.float32), np.arange(size, dtype=np.float32))


def _directional(rng: np.random.Generator, size: int) -> np.ndarray:
    """Coordinate along a random direction, [size, size], in pixels."""
    xx, yy = _grid(size)
    a = rng.uniform(0, np.pi)
    return xx * np.cos(a) + yy * np.sin(a)


def texture(rng: np.random.Generator, size: int) -> np.ndarray:
    """A textured background [size, size, 3]: gradient, value noise, stripes, checks or speckle."""
    base = rng.uniform(0.0, 1.0, 3).astype(np.float32)
    kind = int(rng.integers(5))
    if kind == 0:  # two-colour gradient
        t = _directional(rng, size)
        t = (t - t.min()) / max(float(np.ptp(t)), 1e-6)
        other = rng.uniform(0.0, 1.0, 3).astype(np.float32)
        img = base * (1 - t[..., None]) + other * t[..., None]
    elif kind == 1:  # smooth value noise
        cells = int(rng.integers(3, 8))
        low = np.clip(base + rng.normal(0, 0.25, (cells, cells, 3)), 0, 1)
        img = (
            np.asarray(
                Image.fromarray((low * 255).astype(np.uint8)).resize((size, size), Image.BILINEAR), dtype=np.float32
            )
            / 255.0
        )
    elif kind == 2:  # low-contrast stripes
        period = rng.uniform(3.0, 8.0) * size / 32
        wave = np.sin(2 * np.pi * _directional(rng, size) / period)
        img = base + 0.15 * wave[..., None] * rng.choice([-1.0, 1.0], 3)
    elif kind == 3:  # low-contrast checkerboard
        cell = int(rng.integers(2, 6)) * max(1, size // 32)
        xx, yy = _grid(size)
        chk = ((xx // cell + yy // cell) % 2)[..., None]
        img = base + (chk - 0.5) * rng.uniform(0.1, 0.3) * rng.choice([-1.0, 1.0], 3)
    else:  # speckle
        img = base + rng.normal(0, 0.1, (size, size, 3))
    img = img + rng.normal(0, 0.02, (size, size, 3))
    return np.clip(img, 0, 1).astype(np.float32)


def contrasting_colour(rng: np.random.Generator, against: np.ndarray, min_dist: float = 0.45) -> np.ndarray:
    """A random RGB colour at least ``min_dist`` (Euclidean, [0, 1] units) from ``against``."""
    for _ in range(50):
        c = rng.uniform(0.0, 1.0, 3)
        if np.linalg.norm(c - against) >= min_dist:
            return c.astype(np.float32)
    return (1.0 - np.round(against)).astype(np.float32)


def pattern(rng: np.random.Generator, size: int, c1: np.ndarray, c2: np.ndarray) -> np.ndarray:
    """Stripes, checks or dots of colours ``c1``/``c2``. [size, size, 3]."""
    kind = int(rng.integers(3))
    scale = size / 32
    if kind == 0:
        period = rng.uniform(3.0, 5.0) * scale
        m = (np.sin(2 * np.pi * _directional(rng, size) / period) > 0).astype(np.float32)
    elif kind == 1:
        cell = max(1, int(round(rng.uniform(1.5, 3.0) * scale)))
        xx, yy = _grid(size)
        m = ((xx // cell + yy // cell) % 2).astype(np.float32)
    else:
        period = rng.uniform(3.5, 5.0) * scale
        xx, yy = _grid(size)
        dx, dy = (xx % period) - period / 2, (yy % period) - period / 2
        m = (dx**2 + dy**2 <= (0.3 * period) ** 2).astype(np.float32)
    return c1 * (1 - m[..., None]) + c2 * m[..., None]


def composite(bg: np.ndarray, mask: np.ndarray, fg: np.ndarray) -> np.ndarray:
    """``bg`` with ``fg`` (colour [3] or image [S, S, 3]) painted through ``mask`` [S, S]."""
    return bg * (1 - mask[..., None]) + fg * mask[..., None]


def to_uint8(img: np.ndarray) -> np.ndarray:
    return np.clip(np.round(img * 255), 0, 255).astype(np.uint8)


# ---- whole images ------------------------------------------------------------------------
def random_pose(rng: np.random.Generator, size: int) -> tuple[float, float, float, float]:
    """(cx, cy, radius, angle): radius 30-45% of the image, the shape fully inside, any rotation."""
    radius = rng.uniform(0.30, 0.45) * size
    cx, cy = rng.uniform(radius, size - radius, 2)
    return float(cx), float(cy), float(radius), float(rng.uniform(0, 2 * np.pi))


def _iid(rng: np.random.Generator, parts: list[Part], size: int, behind: list[list[Part]] = ()) -> np.ndarray:
    bg = texture(rng, size)
    for other in behind:  # clutter: flat objects in colours of their own, under the object
        bg = composite(bg, fill_mask(other, size), contrasting_colour(rng, bg.reshape(-1, 3).mean(0), 0.3))
    fg = contrasting_colour(rng, bg.reshape(-1, 3).mean(0))
    shade = 1 + 0.12 * (_directional(rng, size) / size - 0.5)
    fg_img = np.clip(fg * shade[..., None], 0, 1)
    return composite(bg, fill_mask(parts, size), fg_img)


def draw_image(rng: np.random.Generator, name: str, size: int, style: str = "iid") -> np.ndarray:
    """One image of class ``name`` at a random pose in rendition ``style``. uint8 [size, size, 3]."""
    if style not in STYLES:
        raise KeyError(f"unknown style {style!r}; known: {list(STYLES)}")
    return draw_parts(rng, place(name, *random_pose(rng, size)), size, style)


def draw_parts(
    rng: np.random.Generator, parts: list[Part], size: int, style: str = "iid", behind: list[list[Part]] = ()
) -> np.ndarray:
    """An image of ``parts`` (pixel coordinates) in rendition ``style``; ``behind``: other objects
    (clutter) painted first in their own colours, in the ``iid`` style only. uint8 [size, size, 3]."""
    if style not in STYLES:
        raise KeyError(f"unknown style {style!r}; known: {list(STYLES)}")
    scale = size / 32
    if style == "iid":
        img = _iid(rng, parts, size, behind)
    elif style == "sketch":
        paper = rng.uniform(0.85, 1.0) - np.abs(rng.normal(0, 0.03, (size, size, 1)))
        ink = rng.uniform(0.0, 0.3, 3) * rng.uniform(0.5, 1.0)
        img = np.repeat(paper, 3, axis=2)
        for _ in range(2):  # two jittery passes, like a hand-drawn line
            shaky = [(p + rng.normal(0, 0.35 * scale, p.shape), h) for p, h in parts]
            img = composite(img, 0.85 * stroke_mask(shaky, size, rng.uniform(0.7, 1.3) * scale), ink)
    elif style == "cartoon":
        bg = rng.uniform(0.75, 1.0, 3)
        fg = np.eye(3)[rng.permutation(3)] @ np.array([1.0, rng.uniform(0, 0.6), 0.0])
        img = composite(np.broadcast_to(bg, (size, size, 3)), fill_mask(parts, size), fg)
        img = composite(img, stroke_mask(parts, size, 1.6 * scale), np.zeros(3))
    elif style == "pattern":
        bg = rng.uniform(0.0, 1.0, 3)
        c1, c2 = contrasting_colour(rng, bg), contrasting_colour(rng, bg)
        c2 = contrasting_colour(rng, c1, 0.5) if np.linalg.norm(c1 - c2) < 0.5 else c2
        img = composite(np.broadcast_to(bg, (size, size, 3)), fill_mask(parts, size), pattern(rng, size, c1, c2))
    elif style == "inverted":
        img = 1.0 - _iid(rng, parts, size)
    else:  # pixelated
        low = max(4, size // 3)
        small = Image.fromarray(to_uint8(_iid(rng, parts, size))).resize((low, low), Image.BOX)
        return np.asarray(small.resize((size, size), Image.NEAREST), dtype=np.uint8).copy()
    return to_uint8(img)
