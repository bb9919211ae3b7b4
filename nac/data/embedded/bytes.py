"""``bytes``: byte-level binary document classification with evidence spread over the document
(a stand-in for LRA's byte-level IMDB task).

Generator: a movie "review" of at most ``max_length`` bytes (70-100% of it used), made of neutral
filler sentences with ``m`` evidence sentences inserted at uniformly random positions, where
``m`` is uniform in ``[max(3, L // 400), max(5, L // 90)]`` (``L = max_length``). An evidence
sentence carries one phrase ``[modifier] adjective`` whose score is

    polarity(adjective) (+1 in ``POSITIVE``, -1 in ``NEGATIVE``) x weight(modifier)
    weight: none 1, ``INTENSIFIERS`` 2, ``DOWNTONERS`` 0.5, ``not`` -1.

The label is computed from the text: 1 (positive) if the summed score is > 0, else 0. Documents
are kept only if ``|score| >= 1`` and at least one phrase opposes the label, so no single phrase
decides it: a model has to find and weigh several phrases spread across the document (a
bag-of-phrases signal with negation and intensity). Filler reuses the aspect nouns, ``not`` and
the intensifiers in neutral contexts ("the score was not recorded in Paris", "a very long
queue"), so none of them alone is a cue. Labels are balanced in every split.

``download()`` writes ``bytes_{train,val,test}.tsv`` (columns ``text``, ``label``, ``score``).
Storage: ``tokens`` int16 ``[N, max_length]`` (byte + 1, pad 0), ``mask`` bool, ``labels`` int64.
Items: ``"input"`` int64 ``[max_length]``, ``"mask"`` bool (True = real byte), ``"label"`` int64.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tqdm import tqdm

from nac.data.embedded._base import SPLIT_IDS, EmbeddedBuilder, ToItem, atomic_write_text, split_sizes
from nac.data.registry import register

PAD_ID = 0
VOCAB_SIZE = 257  # pad + 256 byte values (byte b -> id b + 1)

POSITIVE = (
    "good",
    "great",
    "excellent",
    "wonderful",
    "superb",
    "charming",
    "delightful",
    "moving",
    "gripping",
    "brilliant",
    "clever",
    "beautiful",
    "funny",
    "fresh",
    "memorable",
    "solid",
)
NEGATIVE = (
    "bad",
    "poor",
    "awful",
    "terrible",
    "boring",
    "dull",
    "tedious",
    "clumsy",
    "weak",
    "messy",
    "forgettable",
    "bland",
    "silly",
    "lazy",
    "annoying",
    "predictable",
)
INTENSIFIERS = ("very", "really", "truly", "extremely", "incredibly")
DOWNTONERS = ("somewhat", "fairly", "mildly", "slightly")
NEGATION = "not"
ASPECTS = (
    "acting",
    "plot",
    "script",
    "direction",
    "music",
    "ending",
    "dialogue",
    "cast",
    "pacing",
    "camera work",
    "story",
    "lead performance",
    "soundtrack",
    "editing",
    "humour",
    "score",
)
EVIDENCE_TEMPLATES = (
    "the {a} was {p}.",
    "i thought the {a} was {p}.",
    "honestly, the {a} felt {p}.",
    "overall the {a} is {p}.",
    "we found the {a} {p}.",
    "to me the {a} seemed {p}.",
)
_NAMES = ("ana ruiz", "tom berg", "li wei", "sara okafor", "jon doyle", "mia costa", "raj patel", "eva lind")
_PLACES = ("paris", "a small town", "the desert", "new york", "a space station", "the mountains", "a harbour")
_ROLES = ("detective", "teacher", "pilot", "villain", "neighbour", "doctor", "captain")
_THINGS = ("train", "dog", "red car", "piano", "lighthouse", "storm", "letter")
_NEUTRAL_ADJ = ("crowded", "quiet", "cold", "warm", "small", "large", "empty", "long")
FILLER_TEMPLATES = (
    "the film runs about {n} minutes.",
    "it was released in {y}.",
    "the story is set in {pl}.",
    "{nm} plays the {r}.",
    "i watched it with a friend on a {d}.",
    "the {a} was handled by {nm}.",
    "there is a scene with a {t} near the end.",
    "it is not a sequel to anything.",
    "the {a} was not recorded in {pl}.",
    "my friend had not seen the trailer.",
    "a very long queue formed outside.",
    "the theatre was really {na}.",
    "{nm} also appears as a {r}.",
    "the {a} team met in {pl} in {y}.",
    "it opens with a {t} and a {t}.",
    "the cinema was {na} that night.",
)
_DAYS = ("monday", "tuesday", "friday", "saturday", "sunday")


def _phrase(rng: np.random.Generator, sign: int) -> tuple[str, float]:
    """A phrase whose score has sign ``sign`` and its score."""
    u = rng.random()
    if u < 0.25:  # negated: the adjective has the opposite polarity
        adj = rng.choice(NEGATIVE if sign > 0 else POSITIVE)
        return f"{NEGATION} {adj}", float(sign)
    adj = rng.choice(POSITIVE if sign > 0 else NEGATIVE)
    if u < 0.5:
        return f"{rng.choice(INTENSIFIERS)} {adj}", 2.0 * sign
    if u < 0.65:
        return f"{rng.choice(DOWNTONERS)} {adj}", 0.5 * sign
    return str(adj), float(sign)


def _filler(rng: np.random.Generator) -> str:
    t = str(rng.choice(FILLER_TEMPLATES))
    slots = {
        "n": lambda: str(int(rng.integers(80, 180))),
        "y": lambda: str(int(rng.integers(1950, 2024))),
        "pl": lambda: rng.choice(_PLACES),
        "nm": lambda: rng.choice(_NAMES),
        "r": lambda: rng.choice(_ROLES),
        "d": lambda: rng.choice(_DAYS),
        "a": lambda: rng.choice(ASPECTS),
        "t": lambda: rng.choice(_THINGS),
        "na": lambda: rng.choice(_NEUTRAL_ADJ),
    }
    for key, fill in slots.items():
        while "{" + key + "}" in t:
            t = t.replace("{" + key + "}", str(fill()), 1)
    return t


def _capitalise(s: str) -> str:
    return s[:1].upper() + s[1:]


def generate_review(rng: np.random.Generator, label: int, max_length: int) -> tuple[str, float]:
    """One document of at most ``max_length`` bytes whose computed label is ``label``; and its score."""
    m_lo, m_hi = max(3, max_length // 400), max(5, max_length // 90)
    target = int(rng.uniform(0.7, 1.0) * max_length)
    want = 1 if label == 1 else -1
    while True:
        m = int(rng.integers(m_lo, m_hi + 1))
        signs = np.where(rng.random(m) < 0.7, want, -want)
        phrases = [_phrase(rng, int(s)) for s in signs]
        score = sum(w for _, w in phrases)
        evidence = [
            _capitalise(str(rng.choice(EVIDENCE_TEMPLATES)).format(a=rng.choice(ASPECTS), p=p)) for p, _ in phrases
        ]
        used = sum(len(e) + 1 for e in evidence)
        if score * want >= 1 and (signs != want).any() and used <= target:
            break
    filler: list[str] = []
    while True:
        f = _capitalise(_filler(rng))
        if used + len(f) + 1 > target:
            break
        filler.append(f)
        used += len(f) + 1
    slots = set(rng.choice(len(filler) + m, size=m, replace=False).tolist())
    ev, fi = iter(evidence), iter(filler)
    sentences = [next(ev) if i in slots else next(fi) for i in range(len(filler) + m)]
    text = " ".join(sentences)
    assert len(text.encode()) <= max_length
    return text, float(score)


def encode_bytes(texts: Sequence[str | bytes], max_length: int, dtype: Any = np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Byte-level ids (byte + 1; pad ``PAD_ID`` = 0 at the end; truncated to ``max_length``, as LRA
    does) of dtype ``dtype`` (int16 or wider) ``[N, max_length]``, and mask bool ``[N, max_length]``.
    ``str`` is encoded as UTF-8."""
    if np.iinfo(dtype).max < VOCAB_SIZE - 1:
        raise ValueError(
            f"encode_bytes: dtype {np.dtype(dtype)} cannot hold ids up to {VOCAB_SIZE - 1}; use int16 or wider"
        )
    tokens = np.zeros((len(texts), max_length), dtype=dtype)
    mask = np.zeros((len(texts), max_length), dtype=bool)
    for i, t in enumerate(texts):
        b = np.frombuffer(t.encode("utf-8") if isinstance(t, str) else bytes(t), dtype=np.uint8)[:max_length]
        tokens[i, : len(b)] = b.astype(dtype) + 1
        mask[i, : len(b)] = True
    return tokens, mask


def write_tsv(path: Path, texts: Sequence[str], labels: Sequence[int], scores: Sequence[float]) -> None:
    rows = ["text\tlabel\tscore"] + [f"{t}\t{int(y)}\t{s:g}" for t, y, s in zip(texts, labels, scores, strict=True)]
    atomic_write_text(path, "\n".join(rows) + "\n")


def read_tsv(path: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """texts, int64 labels [N], float64 scores [N] of a ``bytes_<split>.tsv``."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows or rows[0] != ["text", "label", "score"]:
        raise ValueError(f"{path}: expected header 'text<TAB>label<TAB>score'; regenerate with download()")
    body = rows[1:]
    return [r[0] for r in body], np.array([int(r[1]) for r in body], np.int64), np.array([float(r[2]) for r in body])


@register("bytes")
class Bytes(EmbeddedBuilder):
    """Generated byte-level reviews; short by default (paper setting: max_length 4000).
    See the module docstring."""

    defaults = {"max_length": 512, "n_train": 4000, "n_val": 500, "n_test": 1000, "seed": 0}
    rename = {"tokens": "input", "labels": "label"}
    raw_files = ("bytes_train.tsv", "bytes_val.tsv", "bytes_test.tsv")

    def _max_length(self) -> int:
        L = self.params["max_length"]
        if not isinstance(L, int) or L < 256:
            raise ValueError(f"bytes: max_length must be an int >= 256 (512 default, 4000 in the paper), got {L!r}")
        return L

    def generate(self) -> None:
        L = self._max_length()
        for split in ("train", "val", "test"):
            n = int(self.params[f"n_{split}"])
            rng = self.rng(SPLIT_IDS[split])
            labels = rng.permutation(np.arange(n, dtype=np.int64) % 2)
            docs = [generate_review(rng, int(y), L) for y in tqdm(labels, desc=f"bytes/{split}", leave=False)]
            write_tsv(self.raw_dir / f"bytes_{split}.tsv", [d[0] for d in docs], labels, [d[1] for d in docs])

    def prepare(self) -> None:
        self.check_raw()
        splits = {}
        for split in split_sizes(self.params):
            texts, labels, _ = read_tsv(self.raw_dir / f"bytes_{split}.tsv")
            tokens, mask = encode_bytes(texts, self._max_length(), dtype=np.int16)
            splits[split] = {"tokens": tokens, "mask": mask, "labels": labels}
        self.write(splits)

    def transform(self) -> ToItem:
        return ToItem(long=("input",))

    def info(self) -> dict[str, Any]:
        return {
            "num_classes": 2,
            "class_names": ["negative", "positive"],
            "input_kind": "bytes",
            "input_shape": [self._max_length()],
            "input_dtype": "int64",
            "vocab_size": VOCAB_SIZE,
            "pad_id": PAD_ID,
        }
