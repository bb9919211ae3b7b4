"""A NAC config small enough for CPU unit tests (32 px images, 8x8 tokens): ``make_tiny_config``.
A module of its own (not conftest) so test files import it by a name no other folder shares."""

from nac.config import ModelConfig

# The authors' truncated Tiny-ImageNet kernel (conf/template/tiny_inet_nc_x.yaml; the defaults before
# issue 31): P = 0 beyond cosine distance 0.9, a learnable bandwidth per attention module, the
# signatures fitted at the truncation. The defaults (``ModelConfig()``, conf/template/inet_baral.yaml)
# are untruncated with one fixed kernel; a test about cut links or per-module bandwidths passes this
# explicitly: ``make_tiny_config(**TINY_KERNEL)``. Equal to the template's fields that differ from the
# default template's (tests/test_authors_switches.py).
TINY_KERNEL = dict(truncation=0.9, learn_bandwidth=True, kernel_per_module=True, signature_fit_threshold=None)


def make_tiny_config(**overrides) -> ModelConfig:
    base = dict(
        num_classes=5,
        tokenizer={"kind": "conv32", "dim": 16, "pos_dim": 8},
        d_model=32,
        d_sig=8,
        n_processor=16,
        n_readout=3,
        depth=2,
        heads=4,
        readin_heads=2,
        readout_heads=1,
        ffn_mult=2.0,
        frozen_graph_m=2,
        signature_fit_steps=200,
    )
    base.update(overrides)
    return ModelConfig(**base)


# the conditional circuit generator's sentence tokenizer of the tiny tests (token ids 1..19, 0 = padding)
COND_TOKENIZER = {"kind": "sequence", "vocab_size": 20, "dim": 16, "max_length": 6}


def tiny_batch(model, B: int = 3, seed: int = 0):
    """A batch for a tiny model: uint8 images ``[B, 3, 32, 32]``, labels ``[B]`` in 0..4, and the
    keyword arguments of a conditional generator (``cond`` ``[B, 6]`` token ids, ``cond_mask``),
    empty for other generators; all drawn from one generator seeded with ``seed``."""
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (B, 3, 32, 32), dtype=torch.uint8, generator=g)
    y = torch.randint(0, 5, (B,), generator=g)
    kw = {}
    if model.config.generator == "conditional":
        cond = torch.randint(1, 20, (B, 6), generator=g)
        kw = dict(cond=cond, cond_mask=cond > 0)
    return x, y, kw
