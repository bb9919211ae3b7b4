"""The authors' recorded configurations, as data (issue 49).

``nac/reference/templates/`` holds, read from the authors' repository (mweiss17/NeuralAttentiveCircuits at
commit 41ae372, a read-only mirror), what their code builds for two templates, block by block (read-in,
propagators, kernel, read-out, initial state, code noise, widths, ModFC, optimizer, gradient clipping,
schedule, EMA, AMP, tokenizer, regularizer):

- ``inet_baral_x.yaml``: ``templates/INET-110E-NC-CHONKER-BARAL-X`` (the ImageNet regularized NAC);
- ``tiny_inet_nc_x.yaml``: ``templates/TINY-INET-NC-X`` with ``macros/datasets/tiny_inet.yml``;
- ``baral_x_siblings.yaml``: the four ``INET-110E-NC-*-BARAL-X`` templates compared key by key;
- ``fields.yaml``: which field of our composed configuration expresses each recorded field (or none, why);
- ``comparison.md``: both templates beside our ``mini``, ``converged`` and ``paper`` profiles
  (``python -m nac.reference.compare`` writes it).

In the two template files every ``<block>.<field>`` entry is ``{value, source, note?, template_value?}``;
``source`` lists mirror paths, ``<file>#<yaml/key/path>`` for a YAML key, ``<file>:<line>[-<line>]`` for code
(a class default the template leaves unset). ``template(name)`` returns a file as a dict, ``fields(name)``
its entries flattened to ``{"block.field": entry}``.
"""

from __future__ import annotations

from pathlib import Path

import yaml

TEMPLATES = Path(__file__).resolve().parent / "templates"
RECORDED = ("inet_baral_x", "tiny_inet_nc_x")  # the per-template records (same block.field keys)
HEADER = ("mirror", "template", "macros", "recorded")  # their top-level keys that are not blocks


def template(name: str) -> dict:
    """``nac/reference/templates/<name>.yaml`` as a dict (``inet_baral_x``, ``tiny_inet_nc_x``,
    ``baral_x_siblings``, ``fields``)."""
    path = TEMPLATES / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in TEMPLATES.glob("*.yaml"))
        raise KeyError(f"no recorded template {name!r}; known: {', '.join(known)}")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def fields(name: str) -> dict[str, dict]:
    """The recorded entries of template ``name`` (one of ``RECORDED``) as ``{"block.field": entry}``."""
    if name not in RECORDED:
        raise KeyError(f"{name!r} is not a per-template record; valid: {', '.join(RECORDED)}")
    d = template(name)
    return {
        f"{block}.{field}": entry
        for block, entries in d.items()
        if block not in HEADER and block != "nc_full_tiny_imnet"
        for field, entry in entries.items()
    }
