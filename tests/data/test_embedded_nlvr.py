"""nlvr_shapes: every statement re-checked on its stored scene by an independent parser/checker."""

from __future__ import annotations

import re

import numpy as np
import torch

from nac.data.embedded.nlvr_shapes import NLVRShapes

TINY = {"n_train": 96, "n_val": 16, "n_test": 16}
NUM = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
SCOPE = r"(the left image|the right image|both images)"


def check(sentence: str, left: np.ndarray, right: np.ndarray, colours: list, shapes: list) -> tuple[str, bool]:
    """(family, truth) of ``sentence`` on the scene, parsed with regular expressions."""
    scenes = {"left": [o for o in left.tolist() if o[0] >= 0], "right": [o for o in right.tolist() if o[0] >= 0]}

    def matcher(desc: str):
        words = desc.split()
        noun = words[-1][:-1] if words[-1].endswith("s") else words[-1]
        c = colours.index(words[0]) if len(words) == 2 else None
        s = None if noun == "object" else shapes.index(noun)
        return lambda o: (c is None or o[1] == c) and (s is None or o[0] == s)

    def counts(desc: str, scope: str) -> list[int]:
        m = matcher(desc)
        sides = ["left", "right"] if scope == "both images" else [scope.split()[1]]
        return [sum(map(m, scenes[side])) for side in sides]

    if m := re.fullmatch(rf"there (?:is|are) exactly (\w+) (.+) in {SCOPE}", sentence):
        return "hard_cardinality", all(k == NUM[m[1]] for k in counts(m[2], m[3]))
    if m := re.fullmatch(rf"there (?:is|are) at (least|most) (\w+) (.+) in {SCOPE}", sentence):
        n = NUM[m[2]]
        return "soft_cardinality", all((k >= n) if m[1] == "least" else (k <= n) for k in counts(m[3], m[4]))
    if m := re.fullmatch(rf"there are (many|few) (.+) in {SCOPE}", sentence):
        return "soft_cardinality", all((k >= 3) if m[1] == "many" else (k in (1, 2)) for k in counts(m[2], m[3]))
    if m := re.fullmatch(r"the (left|right) image has (more|fewer) (.+) than the (left|right) image", sentence):
        assert m[1] != m[4]
        a, b = counts(m[3], f"the {m[1]} image")[0], counts(m[3], f"the {m[4]} image")[0]
        return "soft_cardinality", a > b if m[2] == "more" else a < b
    if m := re.fullmatch(rf"there is (a|no) (.+) in {SCOPE}", sentence):
        ks = counts(m[2], m[3])
        return "existential", all(k >= 1 for k in ks) if m[1] == "a" else all(k == 0 for k in ks)
    if m := re.fullmatch(r"in the (left|right) image a (.+) is (above|below|left of|right of) a (.+)", sentence):
        first, second, objs = matcher(m[2]), matcher(m[4]), scenes[m[1]]
        rel = {
            "above": lambda a, b: a[3] < b[3],
            "below": lambda a, b: a[3] > b[3],
            "left of": lambda a, b: a[2] < b[2],
            "right of": lambda a, b: a[2] > b[2],
        }[m[3]]
        hit = any(
            first(a) and second(b) and rel(a, b) for i, a in enumerate(objs) for j, b in enumerate(objs) if i != j
        )
        return "spatial", hit
    raise AssertionError(f"unparsed statement {sentence!r}")


def test_every_label_is_the_truth_of_its_statement(build_dataset):
    b = build_dataset(NLVRShapes, **TINY)
    info = b.info()
    types = info["reasoning_types"]
    assert types == ["hard_cardinality", "soft_cardinality", "existential", "spatial"]
    for split in ("train", "val", "test"):
        a, sentences = b.arrays(split), b.sentences(split)
        for i, s in enumerate(sentences):
            family, truth = check(
                s, a["left_objects"][i], a["right_objects"][i], info["colour_names"], info["shape_names"]
            )
            assert family == types[a["reasoning_type"][i]], s
            assert truth == bool(a["labels"][i]), f"{split}[{i}] {s!r} labelled {bool(a['labels'][i])}"
        # exactly balanced: each type equally often, half true within each type
        rt, y = np.asarray(a["reasoning_type"]), np.asarray(a["labels"])
        n = TINY[f"n_{split}"]
        assert np.bincount(rt, minlength=4).tolist() == [n // 4] * 4
        assert all(y[rt == t].mean() == 0.5 for t in range(4))


def test_items_and_tokens(build_dataset):
    b = build_dataset(NLVRShapes, **TINY)
    info = b.info()
    ds = b.load("val")
    item = ds[5]
    assert item["left"].shape == item["right"].shape == (3, 32, 32) and item["left"].dtype == torch.uint8
    assert item["input"].shape == (2, 3, 32, 32) and torch.equal(item["input"][1], item["right"])
    assert item["cond"].dtype == torch.int64 and item["cond"].shape == (16,)
    assert item["cond_mask"].dtype == torch.bool and item["label"].dtype == torch.int64
    words = [info["vocab"][t] for t in item["cond"][item["cond_mask"]].tolist()]
    assert " ".join(words) == b.sentences("val")[5]
    assert not item["cond"][~item["cond_mask"]].any() and info["pad_id"] == 0
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=8)))
    assert batch["input"].shape == (8, 2, 3, 32, 32) and batch["reasoning_type"].shape == (8,)


def test_images_show_the_stored_scene(build_dataset):
    b = build_dataset(NLVRShapes, **TINY)
    ref = np.array([[217, 31, 31], [38, 166, 51], [38, 77, 230], [242, 209, 26]])  # red, green, blue, yellow
    a = b.arrays("train")
    for side in ("left", "right"):
        for img, objs in zip(a[side], a[f"{side}_objects"]):
            objs = objs[objs[:, 0] >= 0]
            assert 1 <= len(objs) <= b.params["max_objects"]
            for shape, colour, x, y, r in objs.tolist():
                px = img[y, x].astype(int)
                assert np.argmin(((ref - px) ** 2).sum(1)) == colour
            # objects do not overlap
            for i in range(len(objs)):
                for j in range(i + 1, len(objs)):
                    d = np.hypot(*(objs[i, 2:4] - objs[j, 2:4]).astype(float))
                    assert d >= objs[i, 4] + objs[j, 4]


def test_deterministic(build_dataset, cache_files):
    small = {"n_train": 8, "n_val": 8, "n_test": 8}
    a, b = build_dataset(NLVRShapes, "a", **small), build_dataset(NLVRShapes, "b", **small)
    assert cache_files(a) == cache_files(b)
    c = build_dataset(NLVRShapes, "c", **small, seed=9)
    assert b.sentences("train") != c.sentences("train")
