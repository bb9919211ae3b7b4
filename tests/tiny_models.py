"""A NAC config small enough for CPU unit tests (32 px images, 8x8 tokens): ``make_tiny_config``.
A module of its own (not conftest) so test files import it by a name no other folder shares."""

from nac.config import ModelConfig


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
