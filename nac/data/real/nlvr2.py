"""NLVR2 (natural-language visual reasoning over image pairs) with frozen CLIP features.

The annotations are public (``{train,dev,test1}.json``, JSON lines with ``sentence``,
``left_url``, ``right_url``, ``label`` "True"/"False" and ``identifier``); the images are only
available by request, so the user supplies them under ``<root>/raw/nlvr2/images/<split>/``
(any sub-folders; a record ``train-10171-0-0`` uses ``train-10171-0-img0.png`` and ``-img1.png``).

``prepare()`` encodes every distinct image and sentence once with a frozen encoder and caches
the features. The encoder is ``open_clip`` (optional extra: ``pip install -e .[clip]``), or any
object with the ``FeatureEncoder`` interface assigned to ``builder.encoder`` before ``prepare()``
(tests inject a tiny stand-in, since no weights can be downloaded offline).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from PIL import Image, UnidentifiedImageError

from nac.data.download import SOURCES, CorruptFileError, UserDataRequired, fetch
from nac.data.real._common import RealBuilder, progress
from nac.data.registry import register

if TYPE_CHECKING:
    import torch

SPLITS = {"train": "train", "val": "dev", "test": "test1"}  # our name -> NLVR2's file name
IMAGE_EXT = (".png", ".jpg", ".jpeg")
HOW = (
    "The NLVR2 images are distributed by request: fill in the form linked from "
    "https://github.com/lil-lab/nlvr/tree/master/nlvr2 and unpack the images so that each split's "
    "files (e.g. train-10171-0-img0.png) lie anywhere below images/<train|dev|test1>/."
)


class FeatureEncoder(Protocol):
    """A frozen image/text encoder. ``name`` identifies it in the cache manifest."""

    name: str

    def encode_images(self, images: list[Image.Image]) -> torch.Tensor:
        """RGB PIL images -> features [B, D]."""

    def encode_texts(self, texts: list[str]) -> torch.Tensor:
        """Sentences -> features [B, D]."""


class OpenCLIPEncoder:
    """``open_clip`` model + its preprocessing; ``pretrained`` is a tag ("openai") or a local file."""

    def __init__(self, model: str, pretrained: str, device: str = "auto"):
        try:
            import open_clip  # deferred: an optional extra ([clip]), absent from the default install
        except ImportError as e:
            raise ImportError(
                "NLVR2 features need open_clip, an optional extra: run `pip install -e .[clip]` "
                "(or `pip install open_clip_torch`)"
            ) from e
        import torch  # deferred: the data stages run without torch (~1.2 s; tests/test_dvc_deps.py)

        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        try:
            self.model, _, self.preprocess = open_clip.create_model_and_transforms(model, pretrained=pretrained)
        except Exception as e:  # open_clip raises various errors when weights cannot be fetched
            raise RuntimeError(
                f"could not load CLIP {model!r} weights {pretrained!r}: {e}. Without internet, download the "
                f"checkpoint elsewhere and set the nlvr2 param clip_pretrained to its local path"
            ) from e
        self.model = self.model.to(self.device).eval()
        self.tokenizer = open_clip.get_tokenizer(model)
        self.name = f"open_clip:{model}:{pretrained}"

    def encode_images(self, images: list[Image.Image]) -> torch.Tensor:
        import torch  # deferred: the data stages run without torch (~1.2 s; tests/test_dvc_deps.py)

        with torch.no_grad():
            batch = torch.stack([self.preprocess(im) for im in images]).to(self.device)
            return self.model.encode_image(batch).float().cpu()

    def encode_texts(self, texts: list[str]) -> torch.Tensor:
        import torch  # deferred: the data stages run without torch (~1.2 s; tests/test_dvc_deps.py)

        with torch.no_grad():
            return self.model.encode_text(self.tokenizer(texts).to(self.device)).float().cpu()


def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON-lines annotation file -> list of records (errors name the file and line)."""
    records = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            rec["label"] = {"true": 1, "false": 0}[str(rec["label"]).lower()]
            rec["identifier"], rec["sentence"] = str(rec["identifier"]), str(rec["sentence"])
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptFileError(
                f"{path} line {n}: not an NLVR2 record with sentence/label/identifier "
                f"({e!r}); delete the file and rerun the download"
            ) from e
        records.append(rec)
    return records


def image_names(identifier: str) -> tuple[str, str]:
    """``train-10171-0-0`` -> (``train-10171-0-img0``, ``train-10171-0-img1``) (stems, no extension)."""
    stem = identifier.rsplit("-", 1)[0]
    return f"{stem}-img0", f"{stem}-img1"


@register("nlvr2")
class NLVR2(RealBuilder):
    """NLVR2 with frozen CLIP features. Splits ``train``, ``val`` (= dev) and ``test`` (= test1).

    Items: ``input`` float32 [2, D] (left and right image features), ``cond`` float32 [D]
    (sentence features, which condition the circuit), ``label`` int64 (1 = statement true).
    Params: ``urls`` / ``md5s`` (per NLVR2 split), ``image_dir`` (default ``<raw_dir>/images``),
    ``clip_model``, ``clip_pretrained``, ``device``, ``batch_size``. Features are the encoder's raw
    outputs (not L2-normalised). ``records(split)`` gives the sentences and identifiers, row-aligned.
    """

    defaults = {
        "urls": {s: SOURCES[f"nlvr2_{s}"].urls[0] for s in SPLITS.values()},
        "md5s": {s: SOURCES[f"nlvr2_{s}"].md5 for s in SPLITS.values()},
        "image_dir": None,
        "clip_model": "ViT-B-32",
        "clip_pretrained": "openai",
        "device": "auto",
        "batch_size": 64,
    }
    rename = {"images": "input", "text": "cond", "labels": "label"}
    encoder: FeatureEncoder | None = None

    @property
    def image_dir(self) -> Path:
        return Path(self.params["image_dir"]) if self.params["image_dir"] else self.raw_dir / "images"

    def annotation(self, split: str) -> Path:
        return self.raw_dir / "annotations" / f"{SPLITS.get(split, split)}.json"

    def records(self, split: str) -> list[dict[str, Any]]:
        path = self.annotation(split)
        if not path.exists():
            raise FileNotFoundError(f"{path} missing; run `python stages/download.py nlvr2` first")
        return read_records(path)

    def _image_index(self, nlvr_split: str) -> dict[str, Path]:
        folder = self.image_dir / nlvr_split
        if not folder.is_dir():
            return {}
        return {p.stem: p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_EXT}

    def _check_images(self) -> dict[str, dict[str, Path]]:
        """Per NLVR2 split, stem -> path; raises ``UserDataRequired`` listing missing images."""
        indices, missing, total = {}, [], 0
        for ours, theirs in SPLITS.items():
            index = self._image_index(theirs)
            indices[theirs] = index
            for rec in self.records(ours):
                for stem in image_names(rec["identifier"]):
                    if stem not in index:
                        total += 1
                        missing.append(f"{theirs}/{stem}.png")
        if missing:
            shown = "\n".join(f"  {self.image_dir.resolve() / m}" for m in missing[:5])
            raise UserDataRequired(
                f"dataset 'nlvr2' needs images that you must supply: {total} are missing under "
                f"{self.image_dir.resolve()}, e.g.\n{shown}\n{HOW}\n"
                f"Then rerun `python stages/download.py nlvr2` (or set the param image_dir to where they are)."
            )
        return indices

    def download(self) -> None:
        """Fetch the three annotation files, then check that the user-supplied images are present."""
        urls = {**self.defaults["urls"], **(self.params["urls"] or {})}
        md5s = {**self.defaults["md5s"], **(self.params["md5s"] or {})}
        for split in SPLITS.values():
            fetch(urls[split], self.annotation(split), md5=md5s[split])
        self._check_images()

    def _encoder(self) -> FeatureEncoder:
        if self.encoder is None:
            self.encoder = OpenCLIPEncoder(
                self.params["clip_model"], self.params["clip_pretrained"], self.params["device"]
            )
        return self.encoder

    def _encode_images(self, enc: FeatureEncoder, paths: list[Path], desc: str) -> np.ndarray:
        bs, feats = int(self.params["batch_size"]), []
        for start in progress(range(0, len(paths), bs), desc, total=-(-len(paths) // bs), unit="batch"):
            batch = []
            for p in paths[start : start + bs]:
                try:
                    with Image.open(p) as im:
                        batch.append(im.convert("RGB"))
                except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
                    raise CorruptFileError(f"cannot decode image {p}: {e}; replace this file") from e
            feats.append(enc.encode_images(batch).float().numpy())
        return np.concatenate(feats).astype(np.float32)

    def _encode_texts(self, enc: FeatureEncoder, texts: list[str], desc: str) -> np.ndarray:
        bs, feats = int(self.params["batch_size"]), []
        for start in progress(range(0, len(texts), bs), desc, total=-(-len(texts) // bs), unit="batch"):
            feats.append(enc.encode_texts(texts[start : start + bs]).float().numpy())
        return np.concatenate(feats).astype(np.float32)

    def prepare(self) -> None:
        indices = self._check_images()
        enc = self._encoder()
        splits = {}
        for ours, theirs in SPLITS.items():
            recs = self.records(ours)
            stems = [image_names(r["identifier"]) for r in recs]
            uniq_imgs = sorted({s for pair in stems for s in pair})
            img_row = {s: i for i, s in enumerate(uniq_imgs)}
            img_feats = self._encode_images(enc, [indices[theirs][s] for s in uniq_imgs], f"nlvr2 {ours} images")
            uniq_txt = sorted({r["sentence"] for r in recs})
            txt_row = {t: i for i, t in enumerate(uniq_txt)}
            txt_feats = self._encode_texts(enc, uniq_txt, f"nlvr2 {ours} sentences")
            pair_rows = np.asarray([[img_row[a], img_row[b]] for a, b in stems], dtype=np.int64)
            splits[ours] = {
                "images": img_feats[pair_rows],  # [N, 2, D]
                "text": txt_feats[[txt_row[r["sentence"]] for r in recs]],  # [N, D]
                "labels": np.asarray([r["label"] for r in recs], dtype=np.int64),
            }
        dim = int(splits["train"]["images"].shape[-1])
        self.write(
            splits,
            extra={
                "num_classes": 2,
                "class_names": ["false", "true"],
                "encoder": enc.name,
                "input_kind": "features",
                "input_shape": [2, dim],
                "cond_shape": [dim],
            },
        )
