"""listops: the generator's semantics checked by an independent evaluator over the TSV strings."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
import torch

from nac.data.embedded import listops as lo

TINY = {"n_train": 200, "n_val": 50, "n_test": 50}


def stack_eval(source: str) -> tuple[int, int, int, int]:
    """Independent evaluator: value, token count, operator nesting depth, most args of one operator.

    Reads whitespace tokens left to right: ``[OP`` opens a frame, digits go to the open frame,
    ``]`` closes it and hands its value to the frame below. Parentheses are ignored.
    """
    frames: list[tuple[str, list[int]]] = [("top", [])]
    n_tok = depth = widest = 0
    for tok in source.split():
        if tok in "()":
            continue
        n_tok += 1
        if tok.startswith("["):
            frames.append((tok[1:], []))
            depth = max(depth, len(frames) - 1)
        elif tok == "]":
            op, args = frames.pop()
            widest = max(widest, len(args))
            srt = sorted(args)
            mid = len(srt) // 2
            med = srt[mid] if len(srt) % 2 else (srt[mid - 1] + srt[mid]) // 2  # floor of the mean of the pair
            frames[-1][1].append({"MIN": min(args), "MAX": max(args), "MED": med, "SM": sum(args) % 10}[op])
        else:
            frames[-1][1].append(int(tok))
    assert len(frames) == 1 and len(frames[0][1]) == 1, f"unbalanced source {source!r}"
    return frames[0][1][0], n_tok, depth, widest


def test_every_target_agrees_with_an_independent_evaluator(build_dataset):
    params = {**TINY, "min_length": 10, "max_length": 60, "max_depth": 5, "max_args": 6}
    b = build_dataset(lo.ListOps, **params)
    seen = set()
    for fname in lo.SPLIT_FILES.values():
        sources, targets = lo.read_lra_tsv(b.raw_dir / fname)
        assert len(sources) == params[f"n_{fname[6:-4]}"]
        for src, tgt in zip(sources, targets):
            value, n_tok, depth, widest = stack_eval(src)
            assert value == tgt, src
            assert params["min_length"] < n_tok < params["max_length"]
            assert depth <= params["max_depth"] - 1  # the root is at depth 1; leaves at most at max_depth
            assert 2 <= widest <= params["max_args"]
        seen |= set(sources)
    assert len(seen) == sum(TINY.values())  # no duplicates, within or across splits
    # all operators and all ten labels appear
    _, targets = lo.read_lra_tsv(b.raw_dir / "basic_train.tsv")
    assert set(targets.tolist()) == set(range(10))


def test_generator_probabilities():
    """Unfiltered trees: 25% of nodes above max depth are operators; args uniform on 2..max_args."""
    rng = np.random.default_rng(0)
    ops = nodes = 0
    nargs = []

    def walk(t, d):
        nonlocal ops, nodes
        if d < 4:
            nodes += 1
            ops += not isinstance(t, int)
        if not isinstance(t, int):
            nargs.append(len(t[1]))
            for a in t[1]:
                walk(a, d + 1)

    for _ in range(4000):
        walk(lo.generate_tree(rng, max_depth=4, max_args=5)[0], 1)
    assert abs(ops / nodes - 0.25) < 0.015
    assert set(nargs) == {2, 3, 4, 5} and abs(statistics.mean(nargs) - 3.5) < 0.1


def test_published_serialisation_and_semantics():
    assert lo.to_source(("[MAX", [2, 9])) == "( ( ( [MAX 2 ) 9 ) ] )"
    tree = ("[SM", [("[MED", [1, 2, 3, 4]), 9, ("[MIN", [7, 5])])
    assert lo.evaluate(tree) == (2 + 9 + 5) % 10  # MED of an even count truncates 2.5 -> 2
    assert stack_eval(lo.to_source(tree))[0] == lo.evaluate(tree)


def test_read_lra_tsv_reads_a_hand_written_lra_file(tmp_path):
    path = tmp_path / "basic_test.tsv"
    path.write_bytes(
        b"Source\tTarget\r\n"  # LRA wrote its files with csv.writer: CRLF line ends
        b"( ( ( [MAX 2 ) 9 ) ] )\t9\r\n"
        b"( ( ( ( [MED 1 ) 2 ) ( ( ( [SM 4 ) 8 ) ] ) ) ] )\t2\r\n"  # MED(1, 2, SM(4, 8) = 2)
    )
    sources, targets = lo.read_lra_tsv(path)
    assert sources == ["( ( ( [MAX 2 ) 9 ) ] )", "( ( ( ( [MED 1 ) 2 ) ( ( ( [SM 4 ) 8 ) ] ) ) ] )"]
    assert targets.dtype == np.int64 and targets.tolist() == [9, 2]
    assert [stack_eval(s)[0] for s in sources] == targets.tolist()
    bad = tmp_path / "bad.tsv"
    bad.write_text("text\tlabel\n1\t1\n")
    with pytest.raises(ValueError, match="header"):
        lo.read_lra_tsv(bad)


def test_tokenize_listops():
    tokens, mask = lo.tokenize_listops(["( ( ( [MAX 2 ) 9 ) ] )", "7"], max_length=6)
    ids = lo.TOKEN_IDS
    assert tokens.dtype == np.int64 and tokens.shape == (2, 6) and mask.dtype == bool
    assert tokens[0].tolist() == [ids["[MAX"], ids["2"], ids["9"], ids["]"], 0, 0]
    assert tokens[1].tolist() == [ids["7"], 0, 0, 0, 0, 0]
    assert mask.sum(1).tolist() == [4, 1]
    assert lo.VOCAB[0] == "<pad>" and len(lo.VOCAB) == 1 + 10 + 4 + 1  # pad, digits, operators, ]
    with pytest.raises(ValueError, match="max_length"):
        lo.tokenize_listops(["( ( ( [MAX 2 ) 9 ) ] )"], max_length=3)
    assert lo.tokenize_listops(["( ( ( [MAX 2 ) 9 ) ] )"], 3, truncate=True)[1].sum() == 3
    with pytest.raises(ValueError, match="unknown token"):
        lo.tokenize_listops(["[FOO 1 ]"], max_length=4)


def test_round_trip(build_dataset):
    b = build_dataset(lo.ListOps, **TINY)
    info = b.info()
    assert info["vocab_size"] == len(info["vocab"]) and info["pad_id"] == 0 and info["num_classes"] == 10
    sources, targets = lo.read_lra_tsv(b.raw_dir / "basic_val.tsv")
    ds = b.load("val")
    assert len(ds) == len(sources)
    for i in (0, len(ds) - 1):
        item = ds[i]
        assert item["input"].dtype == torch.int64 and item["input"].shape == (b.params["max_length"],)
        assert item["mask"].dtype == torch.bool and int(item["label"]) == targets[i]
        words = [info["vocab"][t] for t in item["input"][item["mask"]].tolist()]
        assert words == lo.listops_tokens(sources[i])
        assert not item["input"][~item["mask"]].any()  # padding is id 0
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=16)))
    assert batch["input"].shape == (16, b.params["max_length"])


def test_deterministic(build_dataset, cache_files):
    a, b = build_dataset(lo.ListOps, "a", **TINY), build_dataset(lo.ListOps, "b", **TINY)
    assert cache_files(a) == cache_files(b)
    for f in lo.SPLIT_FILES.values():
        assert (a.raw_dir / f).read_bytes() == (b.raw_dir / f).read_bytes()
    c = build_dataset(lo.ListOps, "c", **TINY, seed=7)
    assert (a.raw_dir / "basic_train.tsv").read_bytes() != (c.raw_dir / "basic_train.tsv").read_bytes()


def test_impossible_length_window_fails_with_advice():
    with pytest.raises(RuntimeError, match="widen the length window"):
        lo.generate_listops(np.random.default_rng(0), 1, 200, 300, max_depth=2, max_args=3)
