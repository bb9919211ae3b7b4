"""``nlvr_shapes``: an NLVR2 stand-in -- two images of coloured shapes, a statement, true/false.

Scene: each image holds 1..``max_objects`` non-overlapping objects (circle / square / triangle,
upright, drawn by ``nac.data.embedded.drawing``; red / green / blue / yellow) on a plain light
background; radius 3-5 px at 32 px (scaled with ``image_size``); centres at least 2 px apart
on both axes. Each example first draws its reasoning type (hard cardinality, soft cardinality,
existential, spatial; see ``nlvr_language`` for exact semantics) and its label (balanced: types
equally frequent, 50/50 true within each type), then a statement of that type WITHOUT looking at
the label, then scene pairs until the statement EVALUATED on the scene equals the label (scenes
plant objects matching the statement's descriptions with a random per-image probability, so
rare truths are reachable). Labels are thus computed from the scene, and the statement text alone
carries (almost) no information about the label.

Storage (per split): ``left`` / ``right`` uint8 ``[N, S, S, 3]``; ``tokens`` int64
``[N, max_words]`` (word ids, pad 0) and ``token_mask`` bool; ``labels`` int64 (1 = true);
``reasoning_type`` int64 (index into ``REASONING_TYPES``); ``left_objects`` / ``right_objects``
int16 ``[N, max_objects, 5]`` (shape, colour, x, y, radius; padding rows -1), the scene the label
was computed on; ``sentence`` (unicode ``[N]``, not part of items; read it with
``builder.sentences(split)``).

Items: ``"left"``, ``"right"`` uint8 ``[3, S, S]`` (CHW); ``"input"`` uint8 ``[2, 3, S, S]`` (the
pair stacked); ``"cond"`` int64 ``[max_words]``; ``"cond_mask"`` bool; ``"label"`` int64;
``"reasoning_type"`` int64; ``"left_objects"`` / ``"right_objects"`` int16 ``[max_objects, 5]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from tqdm import tqdm

from nac.data.embedded import nlvr_language as lang
from nac.data.embedded._base import SPLIT_IDS, EmbeddedBuilder, ToItem, atomic_savez, load_npz, split_sizes
from nac.data.embedded.drawing import draw_flat, place
from nac.data.registry import register

if TYPE_CHECKING:  # the data stages (download, prepare) run without importing torch
    import torch

RAW_FILE = "nlvr_shapes.npz"
RGB = {"red": (0.85, 0.12, 0.12), "green": (0.15, 0.65, 0.2), "blue": (0.15, 0.3, 0.9), "yellow": (0.95, 0.82, 0.1)}


def sample_scene(
    rng: np.random.Generator,
    size: int,
    max_objects: int,
    plant: Sequence[tuple[int | None, int | None]] = (),
    plant_p: float = 0.0,
) -> np.ndarray:
    """Objects of one image, int16 ``[max_objects, 5]`` (shape, colour, x, y, radius), -1 padded.

    Each object copies a random description of ``plant`` (unspecified attributes random) with
    probability ``plant_p``, else is random, so statements about rare combinations can be true.
    """
    k = int(rng.integers(1, max_objects + 1))
    tries = 50 * k  # all random numbers drawn up front: one Generator call per kind, not per try
    radius = np.rint(rng.uniform(3, 5, tries) * size / 32).astype(int)
    span = size - 2 * radius - 2  # centres in [r + 1, size - r - 2]
    xs = (radius + 1 + np.floor(rng.uniform(size=tries) * span)).astype(int).tolist()
    ys = (radius + 1 + np.floor(rng.uniform(size=tries) * span)).astype(int).tolist()
    shapes, colours = (
        rng.integers(len(lang.SHAPES), size=tries).tolist(),
        rng.integers(len(lang.COLOURS), size=tries).tolist(),
    )
    planted = (rng.uniform(size=tries) < plant_p).tolist() if plant else [False] * tries
    which = rng.integers(max(1, len(plant)), size=tries).tolist()
    placed: list[tuple[int, int, int, int, int]] = []
    for t, r in enumerate(radius.tolist()):
        if len(placed) == k:
            break
        x, y = xs[t], ys[t]
        if all(
            (x - ox) ** 2 + (y - oy) ** 2 >= (r + orad + 1) ** 2 and abs(x - ox) >= 2 and abs(y - oy) >= 2
            for _, _, ox, oy, orad in placed
        ):
            shape, colour = shapes[t], colours[t]
            if planted[t]:
                c, s = plant[which[t]]
                shape, colour = (shape if s is None else s), (colour if c is None else c)
            placed.append((shape, colour, x, y, r))
    objs = np.full((max_objects, 5), -1, dtype=np.int16)
    objs[: len(placed)] = placed
    return objs


def render_scene(rng: np.random.Generator, objs: np.ndarray, size: int) -> np.ndarray:
    """Image of the objects on a plain light background. uint8 [size, size, 3]."""
    bg = np.clip(rng.uniform(0.8, 0.95) + rng.uniform(-0.03, 0.03, 3), 0, 1)
    items = [
        (
            place(lang.SHAPES[shape], float(x), float(y), float(r) + 0.5, 0.0),
            np.clip(np.asarray(RGB[lang.COLOURS[colour]]) + rng.uniform(-0.05, 0.05, 3), 0, 1),
        )
        for shape, colour, x, y, r in objs[objs[:, 0] >= 0]
    ]
    return draw_flat(items, size, bg)


class PairItem(ToItem):
    """HWC -> CHW for both images, ``"input"`` = the pair stacked ``[2, 3, S, S]``."""

    def __call__(self, item: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        item = super().__call__(item)
        import torch  # deferred: the data stages run without torch (~1.2 s; tests/test_dvc_deps.py)

        item["input"] = torch.stack([item["left"], item["right"]])
        return item


@register("nlvr_shapes")
class NLVRShapes(EmbeddedBuilder):
    """Image pairs + statements with computed true/false labels. See the module docstring."""

    defaults = {
        "image_size": 32,
        "max_objects": 5,
        "max_words": 16,
        "n_train": 4000,
        "n_val": 500,
        "n_test": 1000,
        "seed": 0,
    }
    rename = {"tokens": "cond", "token_mask": "cond_mask", "labels": "label"}
    raw_files = (RAW_FILE,)
    raw_param_keys = ("image_size", "max_objects", "n_train", "n_val", "n_test", "seed")

    def _check(self) -> tuple[int, int]:
        size, k = self.params["image_size"], self.params["max_objects"]
        if not isinstance(size, int) or size < 24:
            raise ValueError(f"nlvr_shapes: image_size must be an int >= 24 (32 default), got {size!r}")
        if not isinstance(k, int) or not 2 <= k <= len(lang.NUMBERS) - 1:
            raise ValueError(f"nlvr_shapes: max_objects must be an int in 2..{len(lang.NUMBERS) - 1}, got {k!r}")
        return size, k

    def _example(self, rng: np.random.Generator, kind: str, want: bool) -> tuple[Any, ...]:
        """(left objects, right objects, sentence, left image, right image) with truth ``want``.

        The statement is drawn first, independently of ``want``; scenes (planting objects that
        match its descriptions with a random probability per image) are drawn until the
        statement evaluates to ``want``.
        """
        size, k = self._check()
        while True:
            prog = lang.sample_program(rng, kind, k)
            plant = lang.descriptions(prog)
            for _ in range(100):
                left = sample_scene(rng, size, k, plant, rng.uniform())
                right = sample_scene(rng, size, k, plant, rng.uniform())
                if lang.evaluate(prog, left, right) == want:
                    return (
                        left,
                        right,
                        lang.sentence(prog),
                        render_scene(rng, left, size),
                        render_scene(rng, right, size),
                    )

    def generate(self) -> None:
        n_types = len(lang.REASONING_TYPES)
        out: dict[str, np.ndarray] = {}
        for split, n in split_sizes(self.params).items():
            rng = self.rng(SPLIT_IDS[split])
            combo = rng.permutation(np.arange(n, dtype=np.int64) % (2 * n_types))  # balanced (type, label)
            kinds, labels = combo % n_types, combo // n_types
            rows = [
                self._example(rng, lang.REASONING_TYPES[t], bool(y))
                for t, y in tqdm(zip(kinds, labels), total=n, desc=f"nlvr_shapes/{split}", leave=False)
            ]
            out[f"{split}_left_objects"] = np.stack([r[0] for r in rows])
            out[f"{split}_right_objects"] = np.stack([r[1] for r in rows])
            out[f"{split}_sentence"] = np.array([r[2] for r in rows])
            out[f"{split}_left"] = np.stack([r[3] for r in rows])
            out[f"{split}_right"] = np.stack([r[4] for r in rows])
            out[f"{split}_labels"], out[f"{split}_reasoning_type"] = labels, kinds
        atomic_savez(self.raw_dir / RAW_FILE, **out)

    def prepare(self) -> None:
        self.check_raw()
        raw = load_npz(self.raw_dir / RAW_FILE)
        keys = ("left", "right", "labels", "reasoning_type", "left_objects", "right_objects", "sentence")
        splits = {}
        for split in split_sizes(self.params):
            arrays = {k: raw[f"{split}_{k}"] for k in keys}
            arrays["tokens"], arrays["token_mask"] = lang.tokenize(
                list(arrays["sentence"]), int(self.params["max_words"])
            )
            splits[split] = arrays
        self.write(splits)

    def sentences(self, split: str) -> list[str]:
        """The statements of ``split``, in item order."""
        return [str(s) for s in self.arrays(split)["sentence"]]

    def transform(self) -> PairItem:
        return PairItem(chw=("left", "right"))

    def info(self) -> dict[str, Any]:
        size, k = self._check()
        return {
            "num_classes": 2,
            "class_names": ["false", "true"],
            "input_kind": "image_pair",
            "input_shape": [2, 3, size, size],
            "input_dtype": "uint8",
            "input_layout": "CHW, 0-255 (normalise in the model)",
            "cond_kind": "words",
            "cond_shape": [int(self.params["max_words"])],
            "vocab": list(lang.VOCAB),
            "vocab_size": len(lang.VOCAB),
            "pad_id": lang.PAD_ID,
            "reasoning_types": list(lang.REASONING_TYPES),
            "shape_names": list(lang.SHAPES),
            "colour_names": list(lang.COLOURS),
            "object_fields": list(lang.OBJECT_FIELDS),
            "max_objects": k,
        }
