"""train.augment: the authors' Tiny-ImageNet recipe (nac/training/augment.py) and the old
flip + translate (``augment: true``)."""

import contextlib
import random
from collections import Counter

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

pytest.importorskip("timm")

from interrupted_runs import interrupt_then_resume  # noqa: E402
from test_overfit import quadrant_batch  # noqa: E402

from nac import build_model  # noqa: E402
from nac.training import loop  # noqa: E402
from nac.training.augment import (
    AUTHORS_TINYIMAGENET,
    AugmentedDataset,
    BatchMixer,
    RepeatedAugSampler,  # noqa: E402
    recipe_of,
    soft_cross_entropy,
)
from nac.training.config import TrainConfig  # noqa: E402

RECIPE = recipe_of(AUTHORS_TINYIMAGENET)


class Images(Dataset):
    def __init__(self, n=12, size=64, seed=0, classes=200):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, 256, (n, 3, size, size), generator=g, dtype=torch.uint8)
        self.y = torch.arange(n) % classes

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"input": self.x[i], "label": self.y[i]}


class Quadrants(Images):
    def __init__(self, n, seed):
        self.x, self.y = quadrant_batch(n, seed)


def test_recipe_settings_are_the_authors():
    r = RECIPE
    assert (r.color_jitter, r.auto_augment, r.interpolation) == (0.4, "rand-m9-mstd0.5-inc1", "bicubic")
    assert (r.re_prob, r.re_mode, r.re_count, r.repeats) == (0.25, "pixel", 1, 3)
    assert (r.mixup_alpha, r.cutmix_alpha, r.mix_prob, r.switch_prob, r.mix_mode) == (0.8, 1.0, 1.0, 0.5, "batch")
    with pytest.raises(ValueError, match=r"train\.augment='randaugment': Input should be True, False or 'authors_"):
        TrainConfig(augment="randaugment")
    assert TrainConfig(augment=AUTHORS_TINYIMAGENET).augment == AUTHORS_TINYIMAGENET


def test_per_sample_transform_shapes_dtypes_and_determinism():
    ds = AugmentedDataset(Images(4), RECIPE, seed=0)
    states = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    a = [ds[v]["input"] for v in range(8)]
    assert random.getstate() == states[0] and np.array_equal(np.random.get_state()[1], states[1])
    assert torch.equal(torch.get_rng_state(), states[2])  # the global RNGs are left as they were
    for x in a:
        assert x.shape == (3, 64, 64) and x.dtype == torch.float32 and torch.isfinite(x).all()
    assert ds[5]["label"] == 1  # virtual index 5 -> item 1
    torch.manual_seed(99), random.seed(99), np.random.seed(99)  # other global state: same draws
    b = [AugmentedDataset(Images(4), RECIPE, seed=0)[v]["input"] for v in reversed(range(8))][::-1]
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], a[4])  # copies of item 0 are augmented differently
    c = AugmentedDataset(Images(4), RECIPE, seed=1)[0]["input"]
    assert not torch.equal(a[0], c)
    # mostly on the [0, 1] scale (random erasing writes noise outside it)
    assert float(((a[0] >= -1e-3) & (a[0] <= 1 + 1e-3)).float().mean()) > 0.5


def _mix(seed=0, smoothing=0.1, B=8, C=200):
    x = torch.rand(B, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    y = torch.randperm(C, generator=torch.Generator().manual_seed(1))[:B]
    mixer = BatchMixer(RECIPE, C, smoothing, seed=seed)
    xm, t = mixer(x.clone(), y, epoch=2, rank=0, step=5)
    return x, y, xm, t, mixer


def test_mixup_cutmix_soft_targets_mix_exactly_two_labels():
    for smoothing in (0.0, 0.1):
        x, y, xm, t, mixer = _mix(smoothing=smoothing)
        assert xm.shape == x.shape and xm.dtype == torch.float32
        assert t.shape == (8, 200) and t.dtype == torch.float32
        torch.testing.assert_close(t.sum(-1), torch.ones(8))
        off = smoothing / 200
        for i in range(8):
            above = set(torch.nonzero(t[i] > off + 1e-6).flatten().tolist())
            assert above <= {int(y[i]), int(y.flip(0)[i])} and int(y[i]) in above
        # the same lam in every row (mode "batch"); lam = weight on the own label
        lam = (t[:, y].diagonal() - off) / (1 - smoothing)
        assert torch.allclose(lam, lam[0].expand(8), atol=1e-5)
    # determinism: same (seed, epoch, rank, step) -> same mixing; another step -> another
    _, _, xm2, t2, mixer = _mix()
    _, _, xm3, t3, _ = _mix()
    assert torch.equal(xm2, xm3) and torch.equal(t2, t3)
    xs = [
        mixer(torch.rand(8, 3, 8, 8, generator=torch.Generator().manual_seed(0)), torch.arange(8), 0, 0, s)[1]
        for s in range(6)
    ]
    assert any(not torch.equal(xs[0], o) for o in xs[1:])
    with pytest.raises(ValueError, match="even"):
        mixer(torch.rand(3, 3, 8, 8), torch.arange(3), 0, 0, 0)


@contextlib.contextmanager
def _seeded_before(*parts):
    """``nac.training.augment.seeded`` as it was: ``torch.manual_seed``, every device's generator."""
    seq = np.random.SeedSequence([int(p) % (2**32) for p in parts])
    s_py, s_np, s_torch = (int(v) for v in seq.generate_state(3, dtype=np.uint32))
    py_state, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        random.seed(s_py), np.random.seed(s_np), torch.manual_seed(s_torch)
        try:
            yield
        finally:
            random.setstate(py_state), np.random.set_state(np_state)


def test_seeding_draws_as_before_and_leaves_the_cuda_generators_alone(monkeypatch):
    """The mixer's and the per-sample transform's draws are bit for bit the old ``seeded``'s, and no
    CUDA generator is reseeded (the old form reset them at every mixup step; the CPU-only fork did
    not restore them)."""
    from nac.training import augment

    cuda_seeds = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", cuda_seeds.append)

    def draws():
        mixer = BatchMixer(RECIPE, 200, 0.1, seed=0)
        x = torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(0))
        mixed = [t for s in range(4) for t in mixer(x.clone(), torch.arange(8), 1, 0, s)]
        ds = AugmentedDataset(Images(2, size=32), RECIPE, seed=0)
        return mixed + [ds[v]["input"] for v in range(4)]

    now = draws()
    assert cuda_seeds == []
    monkeypatch.setattr(augment, "seeded", _seeded_before)
    before = draws()
    assert cuda_seeds  # the old form did reseed them
    assert len(now) == len(before) and all(torch.equal(a, b) for a, b in zip(now, before))


def test_soft_cross_entropy_matches_hard_labels():
    logits, y = torch.randn(6, 10), torch.arange(6)
    torch.testing.assert_close(soft_cross_entropy(logits, F.one_hot(y, 10).float()), F.cross_entropy(logits, y))


@pytest.mark.parametrize("world", [1, 2, 3, 5, 6])
def test_repeated_sampler_full_epoch_yields_each_index_three_times(world):
    n = 10
    samplers = [RepeatedAugSampler(range(n), world, r, repeats=3, seed=4, full_epoch=True) for r in range(world)]
    for epoch in (0, 1):
        per_rank = []
        for s in samplers:
            s.set_epoch(epoch)
            per_rank.append(list(s))
        assert len({len(p) for p in per_rank}) == 1 and len(per_rank[0]) == len(samplers[0])
        allv = [v for p in per_rank for v in p]
        assert Counter(v % n for v in allv) == {i: 3 for i in range(n)}
        assert len(set(allv)) == 3 * n  # every copy its own virtual index (its own augmentation)
        assert all(epoch * 3 * n <= v < (epoch + 1) * 3 * n for v in allv)
        if world == 3:  # the three copies of an item go to the three processes
            for i in range(n):
                assert sorted(r for r, p in enumerate(per_rank) for v in p if v % n == i) == [0, 1, 2]


def test_repeated_sampler_default_epoch_has_the_dataset_length_and_is_seeded():
    n, world = 24, 3
    s = [RepeatedAugSampler(range(n), world, r, repeats=3, seed=0) for r in range(world)]
    got = [list(x) for x in s]
    assert [len(g) for g in got] == [n // world] * world
    counts = Counter(v % n for g in got for v in g)
    assert set(counts.values()) == {3} and len(counts) == n // 3  # n/3 items, 3 copies each
    again = [list(RepeatedAugSampler(range(n), world, r, repeats=3, seed=0)) for r in range(world)]
    assert again == got
    for x in s:
        x.set_epoch(1)
    assert [list(x) for x in s] != got
    other = [list(RepeatedAugSampler(range(n), world, r, repeats=3, seed=1)) for r in range(world)]
    assert other != got


def _reference_flip_translate(x, pad=4):
    """The pre-recipe ``augment: true`` transform, written out independently."""
    B, _, H, W = x.shape
    flip = torch.rand(B) < 0.5
    out = []
    padded = F.pad(torch.where(flip[:, None, None, None], x.flip(-1), x), (pad,) * 4)
    dy, dx = torch.randint(0, 2 * pad + 1, (2, B)).tolist()
    for i in range(B):
        out.append(padded[i, :, dy[i] : dy[i] + H, dx[i] : dx[i] + W])
    return torch.stack(out)


@pytest.mark.slow  # ~6 s (two short fits); augment: true's gathers are checked bitwise in test_loop_sync
def test_augment_true_is_still_flip_and_translate(tmp_path, tiny_config, monkeypatch):
    x = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8)
    torch.manual_seed(3)
    a = loop.augment_images(x)
    torch.manual_seed(3)
    assert torch.equal(a, _reference_flip_translate(x))
    # the loop applies exactly it (to the raw uint8 batch) with augment: true, and not otherwise
    calls = []
    real = loop.augment_images

    def spy(inputs, *args, **kw):
        calls.append(inputs.dtype)
        return real(inputs, *args, **kw)

    monkeypatch.setattr(loop, "augment_images", spy)
    cfg = dict(epochs=1, batch_size=8, lr=1e-3, warmup_epochs=0, min_lr=1e-4, label_smoothing=0.0, seed=0)
    for augment, expect in ((True, [torch.uint8] * 2), (False, []), (AUTHORS_TINYIMAGENET, [])):
        calls.clear()
        loop.fit(
            build_model(tiny_config(num_classes=4)),
            Quadrants(16, 0),
            None,
            TrainConfig(**cfg, augment=augment),
            progress=False,
        )
        assert calls == expect


@pytest.mark.slow  # ~11 s; exact resume stays in the default run (tests/test_training.py)
def test_recipe_training_is_finite_and_resumes_exactly(tmp_path, tiny_config):
    cfg = TrainConfig(
        epochs=2,
        batch_size=8,
        lr=1e-3,
        warmup_epochs=0,
        min_lr=1e-4,
        label_smoothing=0.1,
        seed=0,
        augment=AUTHORS_TINYIMAGENET,
    )
    train, val = Quadrants(24, 0), Quadrants(8, 1)
    torch.manual_seed(0)
    full = loop.fit(
        build_model(tiny_config(num_classes=4)), train, val, cfg, checkpoint=tmp_path / "a.pt", progress=False
    )
    assert len(full["history"]) == 2 and all(np.isfinite(h["train_loss"]) for h in full["history"])

    resumed = interrupt_then_resume(
        lambda: build_model(tiny_config(num_classes=4)), train, val, cfg, tmp_path / "b.pt", reseed=7
    )
    assert resumed.result["history"] == full["history"]


def test_recipe_inputs_do_not_depend_on_dataloader_workers():
    from torch.utils.data import DataLoader

    ds = AugmentedDataset(Images(6, size=32), RECIPE, seed=3)
    sampler = RepeatedAugSampler(ds, repeats=3, seed=3, full_epoch=True)
    sampler.set_epoch(2)
    batches = [
        torch.cat([b["input"] for b in DataLoader(ds, batch_size=6, sampler=sampler, num_workers=w)]) for w in (0, 2)
    ]
    assert batches[0].shape == (18, 3, 32, 32) and torch.equal(batches[0], batches[1])
