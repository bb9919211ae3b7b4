"""The smallest effects of interest (δ) of the accuracy claims (issue 46): never below the noise of one
per-seed difference of two accuracies on the test set in use.

A per-seed difference of two accuracies measured on n test images has a binomial standard error of
at most ``100 x sqrt(2 x 0.25 / n)`` points (both at 50%, the worst case: a bound known from the
test set's size alone, before any result): 2.24 points on 1,000 images, 0.71 on 10,000. An effect
smaller than that cannot be told from the test set's own noise in one seed's difference, so an
accuracy claim's δ is ``max(its practical threshold, that floor)`` (``accuracy_delta``); each claim's
registry entry says in one line why its δ is what it is (``delta=``)."""

from __future__ import annotations

import math

from nac.report.claims.rules import DELTA

# Test-set sizes of the real datasets (the `paper` profile's), where params hold no n_test: Tiny-ImageNet's
# validation set (its test labels are not public), ModelNet40's test split, LRA ListOps' test set, IMDB's
# test reviews (byte-level text), NLVR2's dev set. Tiny-ImageNet-R (ImageNet-R's images of the classes it
# shares with Tiny-ImageNet) is built at download time: its size is not recorded here, so its floor is unknown.
REAL_TEST_SIZES = {
    "tiny_imagenet": 10_000,
    "modelnet40": 2_468,
    "lra_listops": 2_000,
    "imdb_bytes": 25_000,
    "nlvr2": 6_982,
}


def test_size(params: dict, dataset: str, split: str = "test") -> int | None:
    """The number of images (or items) of ``dataset``'s ``split`` (``test`` or ``val``) in ``params``,
    or None where unknown."""
    spec = (params.get("data") or {}).get(dataset) or {}
    key = "n_val" if split == "val" else "n_test"
    if isinstance(spec, dict) and spec.get(key):
        return int(spec[key])
    return REAL_TEST_SIZES.get(dataset) if split != "val" or dataset == "tiny_imagenet" else None


def noise_floor(n: int | None) -> float:
    """The largest binomial SE of a difference of two accuracies on ``n`` items, in points (0 unknown)."""
    return 100.0 * math.sqrt(2 * 0.25 / n) if n else 0.0


def what_size(params: dict, what: str) -> int | None:
    """The test-set size behind an accuracy ``what``: ``iid`` and ``ood`` (the image track), a track's
    name (its test split), ``fewshot`` (one episode's queries: ways x queries per class); None where
    params do not say."""
    image = params.get("image") or {}
    if what in ("iid", "ood"):  # IID accuracy is measured on image.test_split, OOD on image.ood_split
        dataset = image.get("dataset" if what == "iid" else "ood_dataset")
        split = image.get("test_split", "val") if what == "iid" else image.get("ood_split", "test")
        return test_size(params, dataset, split) if dataset else None
    if what == "nlvr_val":  # the NLVR comparison with CLIP zero-shot reads validation accuracy
        dataset = (params.get("nlvr") or {}).get("dataset")
        return test_size(params, dataset, "val") if dataset else None
    if what == "fewshot":
        proto = (params.get("fewshot") or {}).get("protocol") or {}
        return int(proto["ways"]) * int(proto["queries_per_class"]) if "ways" in proto else None
    dataset = (params.get(what) or {}).get("dataset")
    return test_size(params, dataset) if dataset else None


def accuracy_delta(params: dict, what: str, practical: float = DELTA) -> float:
    """δ of an accuracy claim: ``max(practical, noise_floor(what_size))``, rounded up to 0.01."""
    return math.ceil(100 * max(practical, noise_floor(what_size(params, what)))) / 100


def delta_line(params: dict, what: str, practical: float = DELTA, why: str = "a practical threshold") -> str:
    """The one line that justifies an accuracy claim's δ."""
    n = what_size(params, what)
    floor = noise_floor(n)
    d = accuracy_delta(params, what, practical)
    size = f"{n:,} test items" if n else "an unknown test-set size"
    if floor > practical:
        return (
            f"δ = {d:g}: the noise floor, the largest binomial SE of one per-seed difference on {size} "
            f"({floor:.2f} points), above {why} ({practical:g})"
        )
    return f"δ = {d:g}: {why}, above the noise floor of one per-seed difference on {size} ({floor:.2f} points)"
