"""``pointclouds``: points sampled from 12 parametric 3D primitives, a ModelNet40 stand-in.

Each sample: draw the class's proportions at random (e.g. a cylinder's height, a torus's tube
radius), sample ``num_points`` points uniformly by surface area, centre on the centroid and scale
to the unit sphere, stretch each axis by U(0.85, 1.15) and the whole by U(0.7, 1.0), rotate by a
uniform random rotation in SO(3) (a normalised Gaussian quaternion), jitter every coordinate by
N(0, 0.01) clipped to +-0.03, and shuffle the point order.

Storage: ``points`` float32 ``[N, num_points, 3]``, ``labels`` int64 ``[N]`` (balanced).
Items: ``"input"`` float32 ``[num_points, 3]``, ``"label"`` int64 ``[]``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from tqdm import tqdm

from nac.data.embedded._base import SPLIT_IDS, EmbeddedBuilder, atomic_savez, balanced_labels, load_npz, split_sizes
from nac.data.registry import register

RAW_FILE = "pointclouds.npz"
Rng = np.random.Generator


# ---- surface samplers: (rng, n) -> [n, 3] ------------------------------------------------
def _mesh(rng: Rng, n: int, verts: np.ndarray, faces: list[tuple[int, ...]]) -> np.ndarray:
    """Uniform points on a polyhedron given by convex polygon faces (fan-triangulated)."""
    tris = np.array([(f[0], f[i], f[i + 1]) for f in faces for i in range(1, len(f) - 1)])
    a, b, c = verts[tris[:, 0]], verts[tris[:, 1]], verts[tris[:, 2]]
    area = 0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=1)
    k = rng.choice(len(tris), size=n, p=area / area.sum())
    u, v = rng.uniform(size=(2, n, 1))
    flip = (u + v) > 1
    u, v = np.where(flip, 1 - u, u), np.where(flip, 1 - v, v)
    return a[k] + u * (b[k] - a[k]) + v * (c[k] - a[k])


def _split(rng: Rng, n: int, areas: list[float]) -> np.ndarray:
    return rng.multinomial(n, np.asarray(areas) / np.sum(areas))


def _sphere_dirs(rng: Rng, n: int) -> np.ndarray:
    d = rng.normal(size=(n, 3))
    return d / np.linalg.norm(d, axis=1, keepdims=True)


def _disk(rng: Rng, n: int, r: float, z: float) -> np.ndarray:
    rad, t = r * np.sqrt(rng.uniform(size=n)), rng.uniform(0, 2 * np.pi, n)
    return np.stack([rad * np.cos(t), rad * np.sin(t), np.full(n, z)], axis=1)


def sphere(rng: Rng, n: int) -> np.ndarray:
    return _sphere_dirs(rng, n)


def cube(rng: Rng, n: int) -> np.ndarray:
    v = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], dtype=float)
    faces = [(0, 1, 3, 2), (4, 5, 7, 6), (0, 1, 5, 4), (2, 3, 7, 6), (0, 2, 6, 4), (1, 3, 7, 5)]
    return _mesh(rng, n, v, faces)


def cylinder(rng: Rng, n: int) -> np.ndarray:
    h = rng.uniform(1.5, 3.0)
    side, top, bottom = _split(rng, n, [2 * np.pi * h, np.pi, np.pi])
    t, z = rng.uniform(0, 2 * np.pi, side), rng.uniform(-h / 2, h / 2, side)
    wall = np.stack([np.cos(t), np.sin(t), z], axis=1)
    return np.concatenate([wall, _disk(rng, top, 1.0, h / 2), _disk(rng, bottom, 1.0, -h / 2)])


def cone(rng: Rng, n: int) -> np.ndarray:
    h = rng.uniform(1.5, 2.5)
    side, base = _split(rng, n, [np.pi * np.hypot(1.0, h), np.pi])
    frac, t = np.sqrt(rng.uniform(size=side)), rng.uniform(0, 2 * np.pi, side)  # distance from the apex
    wall = np.stack([frac * np.cos(t), frac * np.sin(t), h / 2 - h * frac], axis=1)
    return np.concatenate([wall, _disk(rng, base, 1.0, -h / 2)])


def torus(rng: Rng, n: int) -> np.ndarray:
    r = rng.uniform(0.25, 0.45)
    out: list[np.ndarray] = []
    while sum(map(len, out)) < n:  # rejection: area element is proportional to 1 + r cos(phi)
        th, ph = rng.uniform(0, 2 * np.pi, (2, 2 * n))
        keep = rng.uniform(size=2 * n) < (1 + r * np.cos(ph)) / (1 + r)
        th, ph = th[keep], ph[keep]
        out.append(np.stack([(1 + r * np.cos(ph)) * np.cos(th), (1 + r * np.cos(ph)) * np.sin(th), r * np.sin(ph)], 1))
    return np.concatenate(out)[:n]


def pyramid(rng: Rng, n: int) -> np.ndarray:
    h = rng.uniform(1.2, 2.0)
    v = np.array([[-1, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0], [0, 0, h]], dtype=float)
    return _mesh(rng, n, v, [(0, 1, 2, 3), (0, 1, 4), (1, 2, 4), (2, 3, 4), (3, 0, 4)])


def tetrahedron(rng: Rng, n: int) -> np.ndarray:
    v = np.array([[1, 1, 1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1]], dtype=float)
    return _mesh(rng, n, v, [(0, 1, 2), (0, 1, 3), (0, 2, 3), (1, 2, 3)])


def octahedron(rng: Rng, n: int) -> np.ndarray:
    v = np.concatenate([np.eye(3), -np.eye(3)])
    faces = [(a, b, c) for a in (0, 3) for b in (1, 4) for c in (2, 5)]
    return _mesh(rng, n, v, faces)


def prism(rng: Rng, n: int) -> np.ndarray:
    h = rng.uniform(1.5, 2.5)
    t = np.pi / 2 + 2 * np.pi * np.arange(3) / 3
    tri = np.stack([np.cos(t), np.sin(t)], axis=1)
    v = np.concatenate([np.c_[tri, np.full(3, -h / 2)], np.c_[tri, np.full(3, h / 2)]])
    return _mesh(rng, n, v, [(0, 1, 2), (3, 4, 5), (0, 1, 4, 3), (1, 2, 5, 4), (2, 0, 3, 5)])


def hemisphere(rng: Rng, n: int) -> np.ndarray:
    dome, base = _split(rng, n, [2 * np.pi, np.pi])
    d = _sphere_dirs(rng, dome)
    d[:, 2] = np.abs(d[:, 2])
    return np.concatenate([d, _disk(rng, base, 1.0, 0.0)])


def capsule(rng: Rng, n: int) -> np.ndarray:
    r, length = 0.5, rng.uniform(1.0, 2.0)
    side, caps = _split(rng, n, [2 * np.pi * r * length, 4 * np.pi * r**2])
    t, z = rng.uniform(0, 2 * np.pi, side), rng.uniform(-length / 2, length / 2, side)
    wall = np.stack([r * np.cos(t), r * np.sin(t), z], axis=1)
    ends = r * _sphere_dirs(rng, caps)
    ends[:, 2] += np.where(ends[:, 2] >= 0, length / 2, -length / 2)
    return np.concatenate([wall, ends])


def helix(rng: Rng, n: int) -> np.ndarray:
    turns, height, tube = rng.uniform(2.0, 3.5), rng.uniform(1.5, 2.5), 0.12
    s = rng.uniform(size=n)  # a helix has constant speed, so uniform s is uniform along it
    w = 2 * np.pi * turns
    centre = np.stack([np.cos(w * s), np.sin(w * s), height * (s - 0.5)], axis=1)
    tangent = np.stack([-w * np.sin(w * s), w * np.cos(w * s), np.full(n, height)], axis=1)
    tangent /= np.linalg.norm(tangent, axis=1, keepdims=True)
    off = rng.normal(size=(n, 3))
    off -= (off * tangent).sum(1, keepdims=True) * tangent
    return centre + tube * off / np.linalg.norm(off, axis=1, keepdims=True)


SAMPLERS: dict[str, Callable[[Rng, int], np.ndarray]] = {
    f.__name__: f
    for f in (sphere, cube, cylinder, cone, torus, pyramid, tetrahedron, octahedron, prism, hemisphere, capsule, helix)
}
CLASSES: tuple[str, ...] = tuple(SAMPLERS)


def random_rotations(rng: Rng, n: int) -> np.ndarray:
    """``n`` rotations uniform on SO(3) (normalised Gaussian quaternions). float64 [n, 3, 3]."""
    q = rng.normal(size=(n, 4))
    # deferred: scipy.spatial.transform ~0.25 s, and every stage imports this module (the dataset registry)
    from scipy.spatial.transform import Rotation

    return Rotation.from_quat(q / np.linalg.norm(q, axis=1, keepdims=True)).as_matrix()


def sample_cloud(rng: Rng, name: str, num_points: int) -> np.ndarray:
    """One posed, scaled, jittered cloud of class ``name``. float32 [num_points, 3]."""
    p = SAMPLERS[name](rng, num_points)
    p = p - p.mean(axis=0)
    p = p / np.linalg.norm(p, axis=1).max()
    p = p * rng.uniform(0.85, 1.15, 3) * rng.uniform(0.7, 1.0)
    p = p @ random_rotations(rng, 1)[0].T
    p = p + np.clip(rng.normal(0, 0.01, p.shape), -0.03, 0.03)
    return p[rng.permutation(num_points)].astype(np.float32)


@register("pointclouds")
class PointClouds(EmbeddedBuilder):
    """12 classes of parametric 3D shapes as point clouds. See the module docstring."""

    defaults = {"num_points": 256, "n_train": 2400, "n_val": 600, "n_test": 600, "seed": 0}
    rename = {"points": "input", "labels": "label"}
    raw_files = (RAW_FILE,)

    def generate(self) -> None:
        n_pts = int(self.params["num_points"])
        if n_pts < 8:
            raise ValueError(f"pointclouds: num_points must be >= 8 (256 default, 2048 in the paper), got {n_pts}")
        out: dict[str, np.ndarray] = {}
        for split, n in split_sizes(self.params).items():
            rng = self.rng(SPLIT_IDS[split])
            labels = balanced_labels(rng, n, len(CLASSES))
            points = np.empty((n, n_pts, 3), dtype=np.float32)
            for i in tqdm(range(n), desc=f"pointclouds/{split}", unit="cloud", leave=False):
                points[i] = sample_cloud(rng, CLASSES[labels[i]], n_pts)
            out[f"{split}_points"], out[f"{split}_labels"] = points, labels
        atomic_savez(self.raw_dir / RAW_FILE, **out)

    def prepare(self) -> None:
        self.check_raw()
        raw = load_npz(self.raw_dir / RAW_FILE)
        self.write({s: {"points": raw[f"{s}_points"], "labels": raw[f"{s}_labels"]} for s in split_sizes(self.params)})

    def info(self) -> dict[str, Any]:
        return {
            "num_classes": len(CLASSES),
            "class_names": list(CLASSES),
            "input_kind": "points",
            "input_shape": [int(self.params["num_points"]), 3],
            "input_dtype": "float32",
        }
