"""Tokenizers (paper section 2.1): turn an input into a set of vectors ``[B, T, d_tokens]``.

- ``conv32``: a small convolutional stem for 32 px images (-> 8x8 tokens).
- ``convnext``: a ConvNeXt-style stem (patchify 4x4, stages of depthwise-7x7 blocks with 2x2
  downsampling between stages); the authors' Tiny-ImageNet setting is depths 3/3/9, dims
  96/192/384 (64 px -> 4x4 tokens), and two stages give 28x28 = 784 tokens at 224 px.
- ``points``: Fourier features of xyz followed by an MLP, one token per point.
- ``sequence``: token embeddings plus positional encodings (learned or sinusoidal).
- ``features``: a linear map of precomputed features (frozen CLIP features for NLVR2).
- ``image_pair``: one image tokenizer applied to two images, plus a learned side embedding.

Image tokenizers take uint8 ``[B, 3, H, W]`` (or floats in [0, 1]) and normalise internally,
and concatenate a learned positional grid (``pos_dim`` channels) to each token.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

TOKENIZERS = ("conv32", "convnext", "points", "sequence", "features", "image_pair")


def _check_tensor(who: str, x, expected: str, rank: int | tuple[int, ...], floating: bool, integer: bool) -> None:
    """Refuse an input of the wrong kind, rank or dtype with what was ``expected`` and what came,
    before it reaches conv / embedding internals (whose errors name neither)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{who} expected a torch.Tensor {expected}, got a {type(x).__name__}")
    ranks = (rank,) if isinstance(rank, int) else rank
    ok = (floating and x.dtype.is_floating_point) or (
        integer and not x.dtype.is_floating_point and not x.dtype.is_complex and x.dtype != torch.bool
    )
    if not ok:
        raise TypeError(f"{who} expected {expected}, got dtype {x.dtype} (shape {list(x.shape)})")
    if x.dim() not in ranks:
        raise ValueError(
            f"{who} expected {expected}, got a {x.dim()}-D tensor of shape {list(x.shape)}"
            + (" (a single example? add the batch dimension: x.unsqueeze(0))" if x.dim() + 1 in ranks else "")
        )


def _check_images(who: str, images, lead: int = 1) -> None:
    """Images ``[*lead dims, 3, H, W]`` (channels first), uint8 or float."""
    shape = "[B, 2, 3, H, W]" if lead == 2 else "[B, 3, H, W]"
    expected = f"uint8 (0-255) or float (0-1) images {shape}, channels first"
    if isinstance(images, torch.Tensor) and images.dtype != torch.uint8 and not images.dtype.is_floating_point:
        raise TypeError(
            f"{who} expected {expected}, got dtype {images.dtype} (shape {list(images.shape)}); "
            "convert with images.to(torch.uint8) for 0-255 values or images.float() / 255"
        )
    _check_tensor(who, images, expected, lead + 3, floating=True, integer=True)
    c = images.shape[lead]
    if c == 3:
        return
    got = f"shape {list(images.shape)}"
    if images.shape[-1] == 3:
        perm = "x.permute(0, 1, 4, 2, 3)" if lead == 2 else "x.permute(0, 3, 1, 2)"
        raise ValueError(f"{who} expected {expected}, got {got}, which looks channels-last; permute it: {perm}")
    if c == 1:
        raise ValueError(
            f"{who} expected {expected}, got {got}: one channel (grayscale); repeat it to 3 channels: "
            f"x.expand({', '.join(['-1'] * lead)}, 3, -1, -1)"
        )
    raise ValueError(f"{who} expected {expected}, got {got}: {c} channels at dim {lead} instead of 3")


def _to_float(images: torch.Tensor) -> torch.Tensor:
    x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
    return (x - 0.5) / 0.25


class ImageTokenizer(nn.Module):
    """Shared tail of the image tokenizers: feature map ``[B, C, h, w]`` -> tokens
    ``[B, h*w, C + pos_dim]`` with a learned positional grid concatenated."""

    def __init__(self, trunk: nn.Module, channels: int, grid: int, pos_dim: int):
        super().__init__()
        self.trunk, self.grid = trunk, grid
        # Unit scale: the grid is concatenated to conv features of order one and then layer-normed
        # with them, so a small init would hide position from the read-in at the start.
        self.pos = nn.Parameter(torch.randn(1, grid * grid, pos_dim)) if pos_dim else None
        self.d_out = channels + pos_dim

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        _check_images("image tokenizer", images)
        fmap = self.trunk(_to_float(images))
        if fmap.shape[-1] != self.grid or fmap.shape[-2] != self.grid:
            raise ValueError(
                f"image tokenizer expected a {self.grid}x{self.grid} feature map, got {tuple(fmap.shape[-2:])}: "
                "check tokenizer.image_size against the dataset's image size"
            )
        tokens = fmap.flatten(2).transpose(1, 2)
        if self.pos is not None:
            tokens = torch.cat([tokens, self.pos.expand(tokens.shape[0], -1, -1)], dim=-1)
        return tokens


def layer_norm_2d(channels: int) -> nn.Module:
    """LayerNorm over the channels of a ``[B, C, H, W]`` map: timm's ``LayerNorm2d`` (imported on
    use: timm loads torchvision) at torch's default eps 1e-5, not timm's 1e-6, as trained so far."""
    from timm.layers import LayerNorm2d  # deferred: timm loads torchvision, ~2.2 s after torch

    return LayerNorm2d(channels, eps=1e-5)


NORMS = {"layer": layer_norm_2d, "batch": nn.BatchNorm2d}


def conv32(
    dim: int = 128, pos_dim: int = 32, image_size: int = 32, norm: str = "batch", width: int = 32
) -> ImageTokenizer:
    """Small stem for 32 px images: four 3x3 convs, two of them stride 2 (``image_size / 4``
    tokens a side). ``norm="batch"`` trains fastest; under DDP it is synchronised across
    processes (``SyncBatchNorm``) so data-parallel training equals single-process training;
    ``"layer"`` avoids batch statistics altogether."""
    if norm not in NORMS:
        raise ValueError(f"conv32 tokenizer: unknown norm {norm!r}; valid choices: {', '.join(NORMS)}")
    Norm = NORMS[norm]
    trunk = nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1),
        Norm(width),
        nn.GELU(),
        nn.Conv2d(width, 2 * width, 3, stride=2, padding=1),
        Norm(2 * width),
        nn.GELU(),
        nn.Conv2d(2 * width, 2 * width, 3, padding=1),
        Norm(2 * width),
        nn.GELU(),
        nn.Conv2d(2 * width, dim, 3, stride=2, padding=1),
    )
    return ImageTokenizer(trunk, dim, image_size // 4, pos_dim)


# Our state_dict names for timm's ConvNeXt block's parameters (the checkpoints written before it).
_CONVNEXT_NAMES = (("conv_dw.", "dw."), ("mlp.fc1.", "mlp.0."), ("mlp.fc2.", "mlp.2."))


def _rename(state_dict: dict, prefix: str, pairs) -> None:
    """Rename in place, keeping their order, the keys under ``prefix`` that start ``prefix + old``."""
    for key in [k for k in state_dict if k.startswith(prefix)]:
        value, local = state_dict.pop(key), key[len(prefix) :]
        for old, new in pairs:
            if local.startswith(old):
                local = new + local[len(old) :]
        state_dict[prefix + local] = value


def _save_our_names(module, state_dict, prefix, local_metadata) -> None:
    _rename(state_dict, prefix, _CONVNEXT_NAMES)


def _load_our_names(module, state_dict, prefix, *args) -> None:
    _rename(state_dict, prefix, [(new, old) for old, new in _CONVNEXT_NAMES])


def convnext_block(dim: int) -> nn.Module:
    """timm's ConvNeXt block on ``[B, dim, H, W]``: depthwise 7x7 conv, LayerNorm (torch's eps
    1e-5), pointwise MLP (x4, GELU), layer scale 1e-6, residual. Its state_dict keeps this suite's
    names (``dw``, ``mlp.0``, ``mlp.2`` for timm's ``conv_dw``, ``mlp.fc1``, ``mlp.fc2``), so the
    checkpoints written before load (tests/test_library_blocks.py). timm imported on use."""
    from timm.models.convnext import ConvNeXtBlock  # deferred: timm loads torchvision, ~2.2 s after torch

    block = ConvNeXtBlock(dim, norm_layer=nn.LayerNorm)
    block.register_state_dict_post_hook(_save_our_names)
    block.register_load_state_dict_pre_hook(_load_our_names)
    return block


def convnext(depths=(3, 3, 9), dims=(96, 192, 384), pos_dim: int = 64, image_size: int = 64) -> ImageTokenizer:
    """ConvNeXt-style stem; ``image_size / (4 * 2**(len(depths)-1))`` tokens a side."""
    if len(depths) != len(dims):
        raise ValueError(f"convnext tokenizer: depths {depths} and dims {dims} must have the same length")
    layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, stride=4), layer_norm_2d(dims[0])]
    for i, (depth, dim) in enumerate(zip(depths, dims)):
        if i > 0:
            layers += [layer_norm_2d(dims[i - 1]), nn.Conv2d(dims[i - 1], dim, 2, stride=2)]
        layers += [convnext_block(dim) for _ in range(depth)]
    grid = image_size // (4 * 2 ** (len(depths) - 1))
    return ImageTokenizer(nn.Sequential(*layers), dims[-1], grid, pos_dim)


class PointTokenizer(nn.Module):
    """Points ``[B, N, 3]`` -> ``[B, N, dim]``: Fourier features (``n_freqs`` octaves) + MLP."""

    def __init__(self, dim: int = 128, n_freqs: int = 8):
        super().__init__()
        self.register_buffer("freqs", (2.0 ** torch.arange(n_freqs)) * math.pi, persistent=False)
        d_feat = 3 + 3 * 2 * n_freqs
        self.mlp = nn.Sequential(nn.Linear(d_feat, dim), nn.GELU(), nn.Linear(dim, dim))
        self.d_out = dim

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        _check_tensor("point tokenizer", points, "float points [B, N, 3]", 3, floating=True, integer=False)
        if points.shape[-1] != 3:
            raise ValueError(
                f"point tokenizer expected float points [B, N, 3] (xyz last), got shape {list(points.shape)}"
                + ("; it looks like [B, 3, N]: transpose it: points.transpose(1, 2)" if points.shape[1] == 3 else "")
            )
        angles = points.float().unsqueeze(-1) * self.freqs  # [B, N, 3, F]
        feats = torch.cat([points.float(), angles.sin().flatten(2), angles.cos().flatten(2)], dim=-1)
        return self.mlp(feats)


def sinusoidal_positions(length: int, dim: int) -> torch.Tensor:
    """The transformer's fixed sinusoidal encodings, ``[length, dim]``."""
    pos = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    pe = torch.zeros(length, dim)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)[:, : dim // 2]
    return pe


class SequenceTokenizer(nn.Module):
    """Token ids ``[B, T]`` (pad id 0) -> ``[B, T, dim]``: embedding + positional encoding."""

    def __init__(self, vocab_size: int, dim: int = 128, max_length: int = 512, positional: str = "learned"):
        super().__init__()
        if positional not in ("learned", "sinusoidal"):
            raise ValueError(f"unknown positional encoding {positional!r}; valid choices: learned, sinusoidal")
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        nn.init.normal_(self.embed.weight, std=0.02)  # the same scale as the positional encodings
        with torch.no_grad():
            self.embed.weight[0].zero_()
        self.max_length = max_length
        if positional == "learned":
            self.pos = nn.Parameter(torch.randn(max_length, dim) * 0.02)
        else:
            self.register_buffer("pos", sinusoidal_positions(max_length, dim), persistent=False)
        self.d_out = dim

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        _check_tensor("sequence tokenizer", ids, "integer token ids [B, T]", 2, floating=False, integer=True)
        if ids.shape[1] > self.max_length:
            raise ValueError(f"sequence of length {ids.shape[1]} exceeds the tokenizer's max_length {self.max_length}")
        return self.embed(ids.long()) + self.pos[: ids.shape[1]]


class FeatureTokenizer(nn.Module):
    """Precomputed features ``[B, N, d_feat]`` (or ``[B, d_feat]``) -> ``[B, N, dim]``."""

    def __init__(self, d_feat: int, dim: int = 128):
        super().__init__()
        self.proj = nn.Linear(d_feat, dim)
        self.d_out = dim

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        d = self.proj.in_features
        _check_tensor(
            "feature tokenizer", feats, f"float features [B, N, {d}] or [B, {d}]", (2, 3), floating=True, integer=False
        )
        if feats.shape[-1] != d:
            raise ValueError(
                f"feature tokenizer expected float features [B, N, {d}] or [B, {d}] (d_feat={d}), got "
                f"shape {list(feats.shape)}"
            )
        return self.proj(feats.float() if feats.dim() == 3 else feats.float().unsqueeze(1))


class ImagePairTokenizer(nn.Module):
    """Two images ``[B, 2, 3, H, W]`` -> tokens of both with a learned left/right embedding."""

    def __init__(self, image_tokenizer: ImageTokenizer):
        super().__init__()
        self.image = image_tokenizer
        self.side = nn.Parameter(torch.randn(2, image_tokenizer.d_out) * 0.02)
        self.d_out = image_tokenizer.d_out

    def forward(self, pair: torch.Tensor) -> torch.Tensor:
        _check_images("image-pair tokenizer", pair, lead=2)
        if pair.shape[1] != 2:
            raise ValueError(
                f"image-pair tokenizer expected two images per example [B, 2, 3, H, W], got shape {list(pair.shape)}"
            )
        B = pair.shape[0]
        tokens = self.image(pair.flatten(0, 1)).unflatten(0, (B, 2))  # [B, 2, T, d]
        return (tokens + self.side[None, :, None, :]).flatten(1, 2)


def build_tokenizer(spec: dict) -> nn.Module:
    """Build a tokenizer from ``{"kind": ..., **kwargs}``; the module exposes ``d_out``."""
    spec = dict(spec)
    kind = spec.pop("kind", None)
    if kind == "conv32":
        return conv32(**spec)
    if kind == "convnext":
        return convnext(**{k: tuple(v) if isinstance(v, list) else v for k, v in spec.items()})
    if kind == "points":
        return PointTokenizer(**spec)
    if kind == "sequence":
        return SequenceTokenizer(**spec)
    if kind == "features":
        return FeatureTokenizer(**spec)
    if kind == "image_pair":
        return ImagePairTokenizer(build_tokenizer(spec.pop("image")))
    raise ValueError(f"unknown tokenizer kind {kind!r}; valid choices: {', '.join(TOKENIZERS)}")
