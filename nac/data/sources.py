"""Where every real dataset comes from: one table of sources (``SOURCES``: URL(s), file name,
checksum, extraction bounds; facts from docs/reference.md). ``nac.data.download`` fetches them;
builders copy an entry into their ``defaults``, so a mirror is one param override away."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """Where one file comes from. ``urls`` are tried in order (the first is canonical)."""

    filename: str
    urls: tuple[str, ...] = ()
    md5: str | None = None
    sha256: str | None = None
    user_supplied: bool = False  # no public URL: the user puts the file in place
    note: str = ""
    # Extraction bounds (``nac.data.archives.extract``), about twice the members the builder
    # extracts from the published archive; the params ``max_extract_mb`` / ``max_extract_files``
    # override them. None: ``extract``'s defaults (a multiple of the archive's size).
    max_extract_mb: int | None = None
    max_extract_files: int | None = None


SOURCES: dict[str, Source] = {
    "tiny_imagenet": Source(
        "tiny-imagenet-200.zip",
        ("https://cs231n.stanford.edu/tiny-imagenet-200.zip",),
        md5="90528d7ca1a48142e341f4ef8d21d0de",
        max_extract_mb=1024,
        max_extract_files=250_000,
    ),
    "imagenet_r": Source(
        "imagenet-r.tar",
        ("https://people.eecs.berkeley.edu/~hendrycks/imagenet-r.tar",),
        md5="a61312130a589d0ca1a8fca1f2bd3337",
        note="2.19 GB",
        max_extract_mb=5 * 1024,
        max_extract_files=60_000,
    ),
    "cub": Source(
        "CUB_200_2011.tgz",
        ("https://data.caltech.edu/records/65de6-vp158/files/CUB_200_2011.tgz",),
        md5="97eceeb196236b17998738112f37df78",
        max_extract_mb=3 * 1024,
        max_extract_files=30_000,
    ),
    "cifar10": Source(
        "cifar-10-python.tar.gz",
        ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
        md5="c58f30108f718f92721af3b95e74349a",
        max_extract_mb=512,
        max_extract_files=100,
    ),
    "cifar100": Source(
        "cifar-100-python.tar.gz",
        ("https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",),
        md5="eb9058c3a382ffc7106e4002c42a8d85",
        max_extract_mb=512,
        max_extract_files=100,
    ),
    "modelnet40": Source(
        "modelnet40_ply_hdf5_2048.zip",
        (
            "https://shapenet.cs.stanford.edu/media/modelnet40_ply_hdf5_2048.zip",
            # The Stanford host is often down; this mirror serves the same archive.
            "https://huggingface.co/datasets/Msun/modelnet40/resolve/main/modelnet40_ply_hdf5_2048.zip",
        ),
        md5="c9ab8e6dfb16f67afdab25e155c79e59",
        max_extract_mb=2 * 1024,
        max_extract_files=1_000,
    ),
    "lra": Source(
        "lra_release.gz",
        ("https://storage.googleapis.com/long-range-arena/lra_release.gz",),
        note="a gzipped tar; no checksum is published",
        max_extract_mb=4 * 1024,
        max_extract_files=1_000,
    ),  # the ListOps members only
    "imdb": Source(
        "aclImdb_v1.tar.gz",
        ("https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",),
        sha256="c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
        note="84 MB",
        max_extract_mb=1024,
        max_extract_files=120_000,
    ),  # the labelled reviews only
    **{
        f"nlvr2_{split}": Source(
            f"{split}.json",
            (f"https://raw.githubusercontent.com/lil-lab/nlvr/master/nlvr2/data/{split}.json",),
            md5="e0423ecad966f61a6548bacddb79edc8" if split == "dev" else None,
        )
        for split in ("train", "dev", "test1")
    },
    "imagenet_train": Source("ILSVRC2012_img_train.tar", md5="1d675b47d978889d74fa0da5fadfb00e", user_supplied=True),
    "imagenet_val": Source("ILSVRC2012_img_val.tar", md5="29b22e2961454d5413ddabcf34fc5622", user_supplied=True),
    "imagenet_devkit": Source(
        "ILSVRC2012_devkit_t12.tar.gz", md5="fa75699e90414af021442c21a62c3abf", user_supplied=True
    ),
}


# ---------------------------------------------------------------------------------------- errors
