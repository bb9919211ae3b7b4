"""CIFAR-10 / CIFAR-100, few-shot transfer targets (Figure 4), read by torchvision.

The archive is fetched and verified by ``nac.data.download.fetch`` (atomic, clear checksum
errors, mirrors through the ``url`` param) and extracted safely; torchvision's
``CIFAR10`` / ``CIFAR100`` then parse the pickles. torchvision also checks each pickle's md5;
those md5s belong to the canonical archive, so they are checked only when the archive's md5 is
the published one (a custom archive is vouched for by the ``md5`` param you give).
"""

from __future__ import annotations

import numpy as np

from nac.data.download import SOURCES, CorruptFileError
from nac.data.real._common import RealBuilder, source_defaults
from nac.data.registry import register


class _CifarBase(RealBuilder):
    """Splits ``train`` [50000] and ``test`` [10000] (``val`` is an alias of ``test``).

    Items: ``input`` uint8 [3, 32, 32], ``label`` int64 (CIFAR-100: the 100 fine labels).
    """

    tv_name = "CIFAR10"  # the torchvision.datasets class that parses the pickles
    rename = {"images": "input", "labels": "label"}
    image_keys = ("images",)
    split_alias = {"val": "test"}

    @property
    def tv_class(self) -> type:
        # deferred: torchvision costs ~2.5 s after torch, and every pipeline stage imports this module
        # through the dataset registry when it validates params.yaml (tests/test_dvc_deps.py)
        import torchvision

        return getattr(torchvision.datasets, self.tv_name)

    def _dataset_class(self) -> type:
        canonical = (self.params.get("md5") or "").lower() == SOURCES[self.source].md5
        if canonical:
            return self.tv_class
        # A custom archive: its member md5s are not torchvision's; the archive md5 was verified.
        base = self.tv_class
        return type(
            base.__name__ + "Custom",
            (base,),
            {
                "train_list": [[f, None] for f, _ in base.train_list],
                "test_list": [[f, None] for f, _ in base.test_list],
                "meta": {**base.meta, "md5": None},
            },
        )

    def _read(self, train: bool):
        cls = self._dataset_class()
        folder = self.extracted / cls.base_folder
        try:
            return cls(str(self.extracted), train=train, download=False)
        except RuntimeError as e:
            raise CorruptFileError(
                f"torchvision could not read {self.name} from {folder} ({e}): a pickle is missing or its md5 "
                f"differs from torchvision's. Delete {self.raw_dir} and rerun "
                f"`python stages/download.py {self.name}`"
            ) from e
        except (OSError, EOFError, ValueError, KeyError) as e:  # unpickling errors
            raise CorruptFileError(
                f"cannot read the {self.name} pickles in {folder}: {e!r}; delete {self.raw_dir} and rerun the download"
            ) from e

    def prepare(self) -> None:
        self.require_extracted()
        splits = {}
        names: list[str] = []
        for split, train in (("train", True), ("test", False)):
            ds = self._read(train)
            images = np.asarray(ds.data, dtype=np.uint8)
            if images.ndim != 4 or images.shape[1:] != (32, 32, 3):
                raise CorruptFileError(f"{self.name} {split}: expected images [N, 32, 32, 3], got {images.shape}")
            splits[split] = {"images": images, "labels": np.asarray(ds.targets, dtype=np.int64)}
            names = list(ds.classes)
        self.write(
            splits,
            extra={"num_classes": len(names), "class_names": names, "input_kind": "image", "input_shape": [3, 32, 32]},
        )


@register("cifar10")
class CIFAR10(_CifarBase):
    __doc__ = "CIFAR-10: 10 classes. " + _CifarBase.__doc__
    source = "cifar10"
    defaults = source_defaults("cifar10")


@register("cifar100")
class CIFAR100(_CifarBase):
    __doc__ = "CIFAR-100: 100 fine classes. " + _CifarBase.__doc__
    source = "cifar100"
    defaults = source_defaults("cifar100")
    tv_name = "CIFAR100"
