import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    yield


@pytest.fixture
def tiny_config():
    """Factory for a NAC config small enough for CPU unit tests (32 px images, 8x8 tokens)."""
    return make_tiny_config


def make_tiny_config(**overrides):
    from nac.config import ModelConfig

    base = dict(num_classes=5, tokenizer={"kind": "conv32", "dim": 16, "pos_dim": 8}, d_model=32, d_sig=8,
                n_processor=16, n_readout=3, depth=2, heads=4, readin_heads=2, readout_heads=1, ffn_mult=2.0,
                frozen_graph_m=2, signature_fit_steps=200)
    base.update(overrides)
    return ModelConfig(**base)


# --- Until branch fid-fit (issue 25 items 2-3) is merged: the model passes fit= / diagonal= /
# matching= to nac.signatures.prior_signatures, nac.graphs.prior_target and
# nac.regularizer.graph_structure_loss, which do not take them on this branch. This shim drops the
# keywords where the function lacks them (the old behaviour); it is a no-op once they exist.
# TODO(merge): delete this block when fid-fit is in.
def _drop_missing_kwargs(fn, names):
    import functools
    import inspect

    params = inspect.signature(fn).parameters
    missing = [n for n in names if n not in params]
    if not missing:
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        for n in missing:
            kwargs.pop(n, None)
        return fn(*args, **kwargs)
    return wrapper


@pytest.fixture(autouse=True)
def _fid_fit_keywords(monkeypatch):
    import nac.model as model

    monkeypatch.setattr(model, "prior_signatures", _drop_missing_kwargs(model.prior_signatures, ["fit"]))
    monkeypatch.setattr(model, "prior_target", _drop_missing_kwargs(model.prior_target, ["diagonal"]))
    monkeypatch.setattr(model, "graph_structure_loss", _drop_missing_kwargs(model.graph_structure_loss, ["matching"]))
    yield
