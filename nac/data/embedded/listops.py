"""``listops``: LRA ListOps with the published generator's semantics, shorter by default.

Generator (docs/reference.md, "LRA ListOps generator, as published"): a node at depth ``d`` (root at
depth 1) becomes an operator with probability 0.25 while ``d < max_depth`` (else it is a digit
leaf 0-9, drawn uniformly); an operator is one of MIN, MAX, MED, SM (uniform) and takes
``randint(2, max_args)`` (inclusive) arguments. MED = ``int(numpy.median(args))`` (an even count
truncates the mean of the middle pair), SM = ``sum(args) % 10``. A tree's length counts one per
digit and two per operator (its ``[OP`` token and its ``]``): exactly the number of tokens once
parentheses are dropped. Trees with ``min_length < length < max_length`` are kept, duplicates
dropped (first occurrence kept, in generation order, so the result does not depend on Python's
string hashing); the first ``n_train`` kept trees are train, then ``n_val`` val, then ``n_test``.

Serialisation (LRA's): every operator node is written as nested binary pairs, each wrapped in
parentheses, e.g. MAX(2, 9) -> ``( ( ( [MAX 2 ) 9 ) ] )``. ``download()`` writes LRA-format
``basic_{train,val,test}.tsv`` (header ``Source``, ``Target``); ``prepare()`` reads them back with
``read_lra_tsv`` and tokenizes with ``tokenize_listops``, which also read LRA's own files.

Storage: ``tokens`` uint8 ``[N, max_length]`` (pad 0), ``mask`` bool, ``labels`` int64.
Items: ``"input"`` int64 ``[max_length]``, ``"mask"`` bool ``[max_length]`` (True = real token),
``"label"`` int64 ``[]`` (the value, 0-9).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Sequence, Union

import numpy as np
from tqdm import tqdm

from nac.data.embedded._base import EmbeddedBuilder, ToItem, atomic_write_text
from nac.data.registry import register

OPERATORS: tuple[str, ...] = ("[MIN", "[MAX", "[MED", "[SM")
END = "]"
OPERATOR_P = 0.25  # probability that a node below max depth is an operator
PAD_ID = 0
VOCAB: tuple[str, ...] = ("<pad>",) + tuple(str(d) for d in range(10)) + OPERATORS + (END,)
TOKEN_IDS: dict[str, int] = {t: i for i, t in enumerate(VOCAB)}
SPLIT_FILES = {"train": "basic_train.tsv", "val": "basic_val.tsv", "test": "basic_test.tsv"}

Tree = Union[int, tuple[str, list["Tree"]]]


# ---- the generator -----------------------------------------------------------------------
def generate_tree(rng: np.random.Generator, max_depth: int, max_args: int, depth: int = 1) -> tuple[Tree, int]:
    """A random tree and its length (digits + 2 per operator)."""
    if depth < max_depth and rng.random() < OPERATOR_P:
        op = OPERATORS[int(rng.integers(len(OPERATORS)))]
        args, length = [], 2
        for _ in range(int(rng.integers(2, max_args + 1))):
            child, n = generate_tree(rng, max_depth, max_args, depth + 1)
            args.append(child)
            length += n
        return (op, args), length
    return int(rng.integers(10)), 1


def evaluate(tree: Tree) -> int:
    """The value of a tree (0-9)."""
    if isinstance(tree, int):
        return tree
    op, args = tree
    vals = [evaluate(a) for a in args]
    if op == "[MIN":
        return min(vals)
    if op == "[MAX":
        return max(vals)
    if op == "[MED":
        return int(np.median(vals))
    return sum(vals) % 10


def to_source(tree: Tree) -> str:
    """LRA's serialisation: ``( ( ( [OP a ) b ) ] )`` -- each binary pair in parentheses."""
    if isinstance(tree, int):
        return str(tree)
    op, args = tree
    s = op
    for a in args:
        s = f"( {s} {to_source(a)} )"
    return f"( {s} {END} )"


def generate_listops(
    rng: np.random.Generator,
    n: int,
    min_length: int,
    max_length: int,
    max_depth: int,
    max_args: int,
) -> tuple[list[str], np.ndarray]:
    """``n`` distinct sources with ``min_length < length < max_length`` and their int64 targets [n]."""
    if max_args < 2 or max_depth < 2 or min_length + 1 >= max_length:
        raise ValueError(
            f"listops: need max_args >= 2, max_depth >= 2 and min_length + 1 < max_length, got "
            f"max_args={max_args}, max_depth={max_depth}, lengths ({min_length}, {max_length})"
        )
    kept: dict[str, int] = {}
    budget, tries = 1000 * n + 100_000, 0
    with tqdm(total=n, desc="listops", unit="seq", leave=False) as bar:
        while len(kept) < n:
            tries += 1
            if tries > budget:
                raise RuntimeError(
                    f"listops: only {len(kept)} of {n} sequences with {min_length} < length < {max_length} after "
                    f"{tries - 1} trees (max_depth={max_depth}, max_args={max_args}); widen the length window "
                    f"or raise max_depth / max_args so trees can reach that length"
                )
            tree, length = generate_tree(rng, max_depth, max_args)
            if min_length < length < max_length:
                src = to_source(tree)
                if src not in kept:
                    kept[src] = evaluate(tree)
                    bar.update(1)
    return list(kept), np.fromiter(kept.values(), dtype=np.int64, count=n)


# ---- LRA files and tokens (also used by the real-data LRA builder) -------------------------
def write_lra_tsv(path: str | Path, sources: Sequence[str], targets: Sequence[int]) -> None:
    """Write an LRA-format TSV: header ``Source``\\t``Target``, one example a line."""
    rows = ["Source\tTarget"] + [f"{s}\t{int(t)}" for s, t in zip(sources, targets, strict=True)]
    atomic_write_text(Path(path), "\n".join(rows) + "\n")


def read_lra_tsv(path: str | Path) -> tuple[list[str], np.ndarray]:
    """Read an LRA ListOps TSV (ours or LRA's ``basic_*.tsv``): sources and int64 targets [N]."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no ListOps TSV at {path}; expected LRA's basic_{{train,val,test}}.tsv layout")
    sources: list[str] = []
    targets: list[int] = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f, delimiter="\t")
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:2]] != ["Source", "Target"]:
            raise ValueError(f"{path}: first row must be the header 'Source<TAB>Target', got {header!r}")
        for line_no, row in enumerate(reader, start=2):
            if not row or not "".join(row).strip():
                continue
            if len(row) < 2:
                raise ValueError(f"{path}:{line_no}: expected 'source<TAB>target', got {row!r}")
            try:
                target = int(float(row[1]))
            except ValueError:
                raise ValueError(f"{path}:{line_no}: target {row[1]!r} is not an integer 0-9") from None
            sources.append(row[0].strip())
            targets.append(target)
    return sources, np.asarray(targets, dtype=np.int64)


def listops_tokens(source: str) -> list[str]:
    """Whitespace tokens of a source with the parentheses dropped."""
    return [t for t in source.split() if t not in ("(", ")")]


def tokenize_listops(
    sources: Sequence[str],
    max_length: int,
    truncate: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (``VOCAB`` index, pad ``PAD_ID`` = 0 at the end) int64 ``[N, max_length]`` and
    mask bool ``[N, max_length]`` (True = real token).

    A sequence longer than ``max_length`` raises unless ``truncate=True`` (its label would no
    longer be computable from what remains); an unknown token always raises.
    """
    tokens = np.zeros((len(sources), max_length), dtype=np.int64)
    mask = np.zeros((len(sources), max_length), dtype=bool)
    for i, src in enumerate(sources):
        toks = listops_tokens(src)
        if len(toks) > max_length and not truncate:
            raise ValueError(
                f"listops sequence {i} has {len(toks)} tokens > max_length={max_length}; "
                f"raise max_length or pass truncate=True"
            )
        try:
            ids = [TOKEN_IDS[t] for t in toks[:max_length]]
        except KeyError as e:
            raise ValueError(f"listops sequence {i}: unknown token {e.args[0]!r}; vocabulary: {VOCAB[1:]}") from None
        tokens[i, : len(ids)] = ids
        mask[i, : len(ids)] = True
    return tokens, mask


# ---- the builder ---------------------------------------------------------------------------
@register("listops")
class ListOps(EmbeddedBuilder):
    """Generated ListOps in LRA's format; short by default (paper: lengths 500-2000, depth 10,
    args 10, 96k/2k/2k). See the module docstring."""

    defaults = {
        "min_length": 20,
        "max_length": 100,
        "max_depth": 5,
        "max_args": 5,
        "n_train": 10000,
        "n_val": 1000,
        "n_test": 1000,
        "seed": 0,
    }
    rename = {"tokens": "input", "labels": "label"}
    raw_files = tuple(SPLIT_FILES.values())

    def _sizes(self) -> dict[str, int]:
        return {s: int(self.params[f"n_{s}"]) for s in SPLIT_FILES}

    def generate(self) -> None:
        p, sizes = self.params, self._sizes()
        sources, targets = generate_listops(
            self.rng(0),
            sum(sizes.values()),
            int(p["min_length"]),
            int(p["max_length"]),
            int(p["max_depth"]),
            int(p["max_args"]),
        )
        start = 0
        for split, n in sizes.items():
            write_lra_tsv(self.raw_dir / SPLIT_FILES[split], sources[start : start + n], targets[start : start + n])
            start += n

    def prepare(self) -> None:
        self.check_raw()
        splits = {}
        for split, fname in SPLIT_FILES.items():
            sources, targets = read_lra_tsv(self.raw_dir / fname)
            if not sources:
                continue
            tokens, mask = tokenize_listops(sources, int(self.params["max_length"]))
            splits[split] = {"tokens": tokens.astype(np.uint8), "mask": mask, "labels": targets}
        self.write(splits)

    def transform(self) -> ToItem:
        return ToItem(long=("input",))

    def info(self) -> dict[str, Any]:
        return {
            "num_classes": 10,
            "class_names": [str(d) for d in range(10)],
            "input_kind": "tokens",
            "input_shape": [int(self.params["max_length"])],
            "input_dtype": "int64",
            "vocab": list(VOCAB),
            "vocab_size": len(VOCAB),
            "pad_id": PAD_ID,
            "operators": list(OPERATORS),
        }
