"""Statements of ``nlvr_shapes``: programs over a scene pair, their English sentences, their truth.

A scene is two object arrays (left image, right image), int16 ``[K, 5]`` with columns
``OBJECT_FIELDS`` = (shape, colour, x, y, radius); rows with shape -1 are padding. x grows to
the right and y downwards (image coordinates, pixels).

The four reasoning types of the NAC paper's NLVR2 analysis, and the exact semantics used:

- ``hard_cardinality``: "there are exactly two red circles in the left image"
  (count == n; scope "both images" means in each image).
- ``soft_cardinality``: "at least n" (count >= n), "at most n" (count <= n), "many" (count >= 3),
  "few" (count is 1 or 2), "the left image has more/fewer X than the right image".
- ``existential``: "there is a blue square in ..." (count >= 1; "both images": in each),
  "there is no blue square in the left image" (count == 0).
- ``spatial``: "in the left image a circle is above a red triangle": some object matching the
  first description and a different object matching the second with y1 < y2 (above), y1 > y2
  (below), x1 < x2 (left of) or x1 > x2 (right of), comparing centres. Scenes keep centres at
  least 2 px apart on both axes, so no relation is a near-tie.

A description names a colour, a shape or both ("red object", "circle", "red circle").
"""

from __future__ import annotations

from typing import Any

import numpy as np

SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
COLOURS: tuple[str, ...] = ("red", "green", "blue", "yellow")
OBJECT_FIELDS: tuple[str, ...] = ("shape", "colour", "x", "y", "radius")
REASONING_TYPES: tuple[str, ...] = ("hard_cardinality", "soft_cardinality", "existential", "spatial")
NUMBERS: tuple[str, ...] = ("zero", "one", "two", "three", "four", "five")
RELATIONS: dict[str, tuple[str, ...]] = {
    "above": ("above",),
    "below": ("below",),
    "left_of": ("left", "of"),
    "right_of": ("right", "of"),
}
SCOPES = {"left": "the left image", "right": "the right image", "both": "both images"}

_WORDS = {
    "a",
    "are",
    "at",
    "both",
    "exactly",
    "few",
    "fewer",
    "has",
    "image",
    "images",
    "in",
    "is",
    "least",
    "many",
    "more",
    "most",
    "no",
    "object",
    "objects",
    "than",
    "the",
    "there",
    "above",
    "below",
    "left",
    "right",
    "of",
}
PAD_ID = 0
VOCAB: tuple[str, ...] = ("<pad>",) + tuple(
    sorted(_WORDS | set(NUMBERS[1:]) | set(COLOURS) | set(SHAPES) | {s + "s" for s in SHAPES})
)
WORD_IDS: dict[str, int] = {w: i for i, w in enumerate(VOCAB)}

Program = tuple[Any, ...]


# ---- truth -------------------------------------------------------------------------------
def _objects(objs: np.ndarray) -> np.ndarray:
    return objs[objs[:, 0] >= 0]


def count(objs: np.ndarray, colour: int | None, shape: int | None) -> int:
    o = _objects(objs)
    keep = np.ones(len(o), dtype=bool)
    if colour is not None:
        keep &= o[:, 1] == colour
    if shape is not None:
        keep &= o[:, 0] == shape
    return int(keep.sum())


def evaluate(program: Program, left: np.ndarray, right: np.ndarray) -> bool:
    """Truth of ``program`` on the scene pair (object arrays ``[K, 5]``)."""
    op = program[0]
    images = {"left": left, "right": right}
    if op == "rel":
        _, side, rel, c1, s1, c2, s2 = program
        o = _objects(images[side])
        for i, a in enumerate(o):
            for j, b in enumerate(o):
                if i == j or not _match(a, c1, s1) or not _match(b, c2, s2):
                    continue
                if {"above": a[3] < b[3], "below": a[3] > b[3], "left_of": a[2] < b[2], "right_of": a[2] > b[2]}[rel]:
                    return True
        return False
    if op in ("more", "fewer"):
        _, first, c, s = program
        other = "right" if first == "left" else "left"
        n1, n2 = count(images[first], c, s), count(images[other], c, s)
        return n1 > n2 if op == "more" else n1 < n2
    _, scope, c, s, *n = program
    tests = {
        "exactly": lambda k: k == n[0],
        "at_least": lambda k: k >= n[0],
        "at_most": lambda k: k <= n[0],
        "many": lambda k: k >= 3,
        "few": lambda k: 1 <= k <= 2,
        "exists": lambda k: k >= 1,
        "none": lambda k: k == 0,
    }
    sides = ("left", "right") if scope == "both" else (scope,)
    return all(tests[op](count(images[x], c, s)) for x in sides)


def _match(obj: np.ndarray, colour: int | None, shape: int | None) -> bool:
    return (colour is None or obj[1] == colour) and (shape is None or obj[0] == shape)


# ---- words -------------------------------------------------------------------------------
def _desc(colour: int | None, shape: int | None, plural: bool) -> str:
    noun = SHAPES[shape] if shape is not None else "object"
    return " ".join(([COLOURS[colour]] if colour is not None else []) + [noun + ("s" if plural else "")])


def sentence(program: Program) -> str:
    """The English statement of ``program`` (lower case, words from ``VOCAB``)."""
    op = program[0]
    if op == "rel":
        _, side, rel, c1, s1, c2, s2 = program
        return f"in the {side} image a {_desc(c1, s1, False)} is {' '.join(RELATIONS[rel])} a {_desc(c2, s2, False)}"
    if op in ("more", "fewer"):
        _, first, c, s = program
        other = "right" if first == "left" else "left"
        return f"the {first} image has {op} {_desc(c, s, True)} than the {other} image"
    _, scope, c, s, *n = program
    where = SCOPES[scope]
    if op == "exists":
        return f"there is a {_desc(c, s, False)} in {where}"
    if op == "none":
        return f"there is no {_desc(c, s, False)} in {where}"
    if op in ("many", "few"):
        return f"there are {op} {_desc(c, s, True)} in {where}"
    quant = {"exactly": "exactly", "at_least": "at least", "at_most": "at most"}[op]
    verb = "is" if n[0] == 1 else "are"
    return f"there {verb} {quant} {NUMBERS[n[0]]} {_desc(c, s, n[0] != 1)} in {where}"


def tokenize(sentences: list[str], max_words: int) -> tuple[np.ndarray, np.ndarray]:
    """Word ids (``VOCAB`` index, pad 0 at the end) int64 ``[N, max_words]`` and mask bool."""
    ids = np.zeros((len(sentences), max_words), dtype=np.int64)
    mask = np.zeros((len(sentences), max_words), dtype=bool)
    for i, s in enumerate(sentences):
        words = s.split()
        if len(words) > max_words:
            raise ValueError(f"statement {s!r} has {len(words)} words > max_words={max_words}; raise max_words")
        unknown = [w for w in words if w not in WORD_IDS]
        if unknown:
            raise ValueError(f"statement {s!r}: words {unknown} not in the vocabulary {VOCAB[1:]}")
        ids[i, : len(words)] = [WORD_IDS[w] for w in words]
        mask[i, : len(words)] = True
    return ids, mask


# ---- sampling ----------------------------------------------------------------------------
# Statements are drawn WITHOUT looking at a scene; the builder then draws scenes until the
# statement's truth equals the pre-drawn label. So the text alone says nothing about the label.
TEMPLATES: dict[str, tuple[str, ...]] = {
    "hard_cardinality": ("exactly",),
    "soft_cardinality": ("at_least", "at_most", "many", "few", "more", "fewer"),
    "existential": ("exists", "none"),
    "spatial": ("rel",),
}


def _sample_desc(rng: np.random.Generator) -> tuple[int | None, int | None]:
    """A random description: colour and shape (55%), shape only (25%) or colour only (20%)."""
    c, s = int(rng.integers(len(COLOURS))), int(rng.integers(len(SHAPES)))
    drop = rng.random()
    return (None, s) if drop < 0.25 else (c, None) if drop < 0.45 else (c, s)


def sample_program(rng: np.random.Generator, kind: str, max_objects: int) -> Program:
    """A random statement of reasoning type ``kind`` (template uniform within the type)."""
    if kind not in TEMPLATES:
        raise KeyError(f"unknown reasoning type {kind!r}; known: {REASONING_TYPES}")
    op = TEMPLATES[kind][int(rng.integers(len(TEMPLATES[kind])))]
    side = ("left", "right")[int(rng.integers(2))]
    scope = ("left", "right", "both")[int(rng.integers(3))]
    c, s = _sample_desc(rng)
    top = min(4, max_objects)
    if op == "rel":
        return ("rel", side, tuple(RELATIONS)[int(rng.integers(4))], c, s, *_sample_desc(rng))
    if op in ("more", "fewer"):
        return (op, side, c, s)
    if op == "none":
        return (op, side, c, s)
    if op in ("many", "few", "exists"):
        return (op, scope, c, s)
    low = 2 if op == "at_least" else 1
    high = top if op != "at_most" else min(3, max_objects - 1)
    return (op, scope, c, s, int(rng.integers(low, max(low, high) + 1)))


def descriptions(program: Program) -> list[tuple[int | None, int | None]]:
    """The (colour, shape) descriptions a program mentions (used to plant matching objects)."""
    if program[0] == "rel":
        return [program[3:5], program[5:7]]
    return [program[2:4]]
