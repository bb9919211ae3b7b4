"""Embedded datasets: generated offline, deterministic from a seed (see docs/design.md).

Importing this package registers ``shapes``, ``shapes_r``, ``shapes_novel``, ``objects``,
``objects_r``, ``objects_novel``, ``digits``,
``pointclouds``, ``listops``, ``bytes`` and ``nlvr_shapes``. Reusable pieces for the real-data
builders: ``nac.data.embedded.listops.read_lra_tsv`` / ``tokenize_listops`` and
``nac.data.embedded.bytes.encode_bytes``.
"""

from nac.data.embedded import bytes, digits, listops, nlvr_shapes, objects, pointclouds, shapes  # noqa: F401
