import pytest
import torch

from nac import build_model
from nac.checkpoint_io import load_checkpoint, load_model, save_checkpoint
from nac.pruning import drop_modules


@pytest.mark.parametrize("variant", ["nac", "frozen_graph", "perceiver_io"])
def test_checkpoint_round_trip_rebuilds_the_same_model(variant, tmp_path, tiny_config):
    model = build_model(tiny_config(variant=variant)).eval()
    path = save_checkpoint(tmp_path / "m.pt", model, epoch=3)
    assert not (tmp_path / "m.pt.tmp").exists()
    loaded = load_model(path).eval()
    x = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    assert torch.equal(model(x), loaded(x))
    assert load_checkpoint(path)["epoch"] == 3


def test_pruned_model_checkpoint_round_trip(tmp_path, tiny_config):
    model = drop_modules(build_model(tiny_config()), 4).eval()
    loaded = load_model(save_checkpoint(tmp_path / "p.pt", model)).eval()
    assert loaded.config.n_processor == 12
    x = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    assert torch.equal(model(x), loaded(x))


def test_a_checkpoint_storing_the_retired_readin_impl_still_loads(tmp_path, tiny_config):
    """``readin_impl`` (the read-in's reference form, now in nac/testing/reference_forms.py) is no model
    config key any more; a checkpoint that stores it loads, and matches the config without it."""
    model = build_model(tiny_config()).eval()
    path = save_checkpoint(tmp_path / "old.pt", model)
    ckpt = torch.load(path, weights_only=True)
    ckpt["config"]["readin_impl"] = "fast"
    torch.save(ckpt, path)
    with pytest.raises(ValueError, match="readin_impl"):  # not a key of the config any more
        build_model(ckpt["config"])
    loaded = load_model(path, expect_config=model.config.to_dict()).eval()
    x = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    assert torch.equal(model(x), loaded(x))


class Evil:
    def __reduce__(self):
        return (print, ("arbitrary code ran",))


def test_checkpoint_loading_refuses_arbitrary_objects(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format": 1, "payload": Evil()}, path)
    with pytest.raises(RuntimeError, match="cannot be read safely"):
        load_checkpoint(path)


def test_truncated_or_missing_checkpoint_is_a_clear_error(tmp_path, tiny_config):
    path = save_checkpoint(tmp_path / "m.pt", build_model(tiny_config()))
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(RuntimeError, match="delete it and retrain"):
        load_checkpoint(path)
    with pytest.raises(FileNotFoundError, match="train the model first"):
        load_checkpoint(tmp_path / "none.pt")
