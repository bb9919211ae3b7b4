"""``python -m nac.reference.compare [profiles...]``: the Markdown table of ``comparison.md``: every field
recorded for the authors' BARAL-X and TINY templates (``nac/reference/templates/``) beside what our composed
configuration gives for the image track of each profile (default ``mini converged paper``), and the ImageNet
pre-training (``fewshot.pretrain`` of the ``paper`` profile, ``conf/pretrain/imagenet.yaml``) beside BARAL-X.
Our values come from ``nac.pipeline.params.compose`` with the ModelConfig / TrainConfig defaults for keys the
composition leaves out; ``fields.yaml`` says which of our fields expresses each recorded field."""

from __future__ import annotations

import sys
from dataclasses import MISSING
from dataclasses import fields as dc_fields

from nac.circuits.attention import head_width
from nac.config import ModelConfig
from nac.reference import fields, template
from nac.training.config import TrainConfig


def _defaults(cls) -> dict:
    out = {}
    for f in dc_fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


def _tokenizer(m: dict) -> dict:
    return m.get("tokenizer") or {}


def _token_grid(m: dict):
    tk = _tokenizer(m)
    if tk.get("kind") == "convnext":
        side = tk["image_size"] // (4 * 2 ** (len(tk["depths"]) - 1))
    elif tk.get("kind") == "conv32":
        side = tk.get("image_size", 32) // 4
    else:
        return None
    return [side, side]


def _token_dim(m: dict):
    tk = _tokenizer(m)
    width = tk["dims"][-1] if tk.get("kind") == "convnext" else tk.get("dim")
    return None if width is None else width + tk.get("pos_dim", 0)


_KINDS = {"convnext": "ConvNeXtImageTokenizer"}  # our convnext tokenizer is the authors' ConvNeXtImageTokenizer


def _senders(m: dict) -> str:
    return "mediators" if not m["input_latents"] else "input_latents_and_mediators"


# The recorded template whose weight-decay filter each of ours implements (its formula is that template's
# ``optimizer.no_weight_decay_filter``; tests/test_reference_blocks.py checks the implementation against it).
DECAY_TEMPLATES = {"baral_x": "inet_baral_x", "tiny": "tiny_inet_nc_x"}


def _decay_filter(name: str) -> str:
    """The recorded formula our decay filter ``name`` implements, or the name of one the authors have not."""
    if name not in DECAY_TEMPLATES:
        return name
    return fields(DECAY_TEMPLATES[name])["optimizer.no_weight_decay_filter"]["value"]


# The recorded fields whose value on our side follows from other fields (fields.yaml `derived`).
DERIVE = {
    "read_in.latents": lambda m, t: m["input_latents"] or m["n_processor"],
    "read_in.into_processors": lambda m, t: m["input_latents"] == 0,
    "read_in.head_dim": lambda m, t: head_width(m["d_model"], m["readin_heads"], m["head_dim"]),
    "read_in.ffn_kind": lambda m, t: "geglu" if m["gated_ffn"] else "gelu",
    "propagators.head_dim": lambda m, t: head_width(m["d_model"], m["heads"], m["head_dim"]),
    "propagators.ffn_kind": lambda m, t: "geglu" if m["gated_ffn"] else "gelu",
    "propagators.senders": lambda m, t: _senders(m),
    "kernel.read_out_truncation": lambda m, t: m["truncation"] if m["truncate_readout"] else None,
    "kernel.read_out_stochastic": lambda m, t: m["stochastic_kernel"] and m["sample_readout"],
    "kernel.signature_preset": lambda m, t: {
        "graph": f"prior ({m['prior']})",
        "fit_truncation": m["signature_fit_threshold"],
    },
    "read_out.head_dim": lambda m, t: head_width(m["d_model"], m["readout_heads"], m["head_dim"]),
    "read_out.ffn_kind": lambda m, t: "geglu" if m["gated_ffn"] else "gelu",
    "read_out.senders": lambda m, t: _senders(m),
    "initial_state.use_code_as_mean_state": lambda m, t: m["initial_state"] == "code",
    "initial_state.state_noise": lambda m, t: m["state_noise"] > 0,
    "initial_state.state_noise_learned": lambda m, t: False if m["state_noise"] > 0 else None,
    "initial_state.state_noise_at_eval": lambda m, t: False if m["state_noise"] > 0 else None,
    "code_noise.scale": lambda m, t: m["code_noise"] or None,
    "code_noise.in_seeder": lambda m, t: m["code_noise"] > 0,
    "dims.code_dim": lambda m, t: m["d_code"] or m["d_model"],
    "dims.token_dim": lambda m, t: _token_dim(m),
    "modfc.form": lambda m, t: (
        {"one_plus_alpha": "one_plus_gain_ln", "ln_only": "gain_ln"}[m["modfc_gain"]]
        + ("_affine" if m["modfc_norm_affine"] else "")
    ),
    "modfc.gain_init": lambda m, t: m["alpha_init"] if m["modfc_gain"] == "one_plus_alpha" else 1.0,
    "modfc.gain_learnable": lambda m, t: m["modfc_gain"] == "one_plus_alpha",
    "optimizer.lr_scaling": lambda m, t: (
        f"lr * batch_size / {t['lr_batch_scaling']}" if t["lr_batch_scaling"] else "none"
    ),
    "optimizer.no_weight_decay_filter": lambda m, t: _decay_filter(t["decay_filter"]),
    "tokenizer.kind": lambda m, t: _KINDS.get(_tokenizer(m).get("kind"), _tokenizer(m).get("kind")),
    "tokenizer.stages": lambda m, t: len(_tokenizer(m)["depths"]) if "depths" in _tokenizer(m) else None,
    "tokenizer.depths": lambda m, t: _tokenizer(m).get("depths"),
    "tokenizer.dims": lambda m, t: _tokenizer(m).get("dims"),
    "tokenizer.input_size": lambda m, t: _tokenizer(m).get("image_size"),
    "tokenizer.token_grid": lambda m, t: _token_grid(m),
    "tokenizer.positional_grid_dim": lambda m, t: _tokenizer(m).get("pos_dim"),
}


def ours(key: str, spec: dict, m: dict, t: dict):
    """Our value of recorded field ``key`` for model dict ``m`` and train dict ``t``."""
    if key in DERIVE:
        return DERIVE[key](m, t)
    if spec.get("ours") is None:
        return spec.get("fixed")
    section, name = spec["ours"].split(".", 1)
    return (m if section == "model" else t)[name]


def composed(profile: str, where: str = "image") -> tuple[dict, dict]:
    """(model, train) dicts of ``profile``'s image track (``where="image"``) or its ImageNet pre-training
    (``where="pretrain"``), our class defaults filled in."""
    from nac.pipeline.params import compose

    p = compose([f"profile={profile}"])
    sec = p["image"] if where == "image" else p["fewshot"]["pretrain"]
    if sec is None:
        raise ValueError(f"profile {profile!r} has no {where} section")
    prior = p.get("prior") or {}
    m = {**_defaults(ModelConfig), "prior": prior.get("name", "scale_free"), **sec["model"]}
    t = {**_defaults(TrainConfig), **sec["train"]}
    return m, t


def show(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {show(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(show(x) for x in v) + "]"
    return str(v)


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _mark(v, baral, tiny) -> str:
    tags = [n for n, ref in (("B", baral), ("T", tiny)) if _same(v, ref)]
    return f"{show(v)} ({'='.join(tags)})" if tags else show(v)


def table(profiles: list[str]) -> str:
    spec = template("fields")
    baral, tiny = fields("inet_baral_x"), fields("tiny_inet_nc_x")
    sides = {p: composed(p) for p in profiles}
    head = ["field", "BARAL-X", "TINY", *profiles, "our field"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in baral:
        b, t_ = baral[key]["value"], tiny[key]["value"]
        tv = tiny[key].get("template_value")
        tcell = show(t_) + (f" (template: {show(tv)})" if tv is not None else "")
        ours_cells = [_mark(ours(key, spec[key], *sides[p]), b, t_) for p in profiles]
        field = spec[key]["ours"] or "none"
        lines.append("| " + " | ".join([key, show(b), tcell, *ours_cells, field]) + " |")
    return "\n".join(lines)


def pretrain_table(profile: str = "paper") -> str:
    spec = template("fields")
    baral = fields("inet_baral_x")
    m, t = composed(profile, "pretrain")
    lines = ["| field | BARAL-X | ours (fewshot.pretrain) | same |", "|---|---|---|---|"]
    for key, entry in baral.items():
        v = ours(key, spec[key], m, t)
        lines.append(f"| {key} | {show(entry['value'])} | {show(v)} | {'yes' if _same(v, entry['value']) else 'no'} |")
    return "\n".join(lines)


# The rule (docs/reference.md, "Configurations"): BARAL-X decides the model and its optimisation; on the
# image track the dataset's template, TINY-INET-NC-X with its dataset macro, decides the data side (these
# fields); the ImageNet pre-training takes BARAL-X whole (its own dataset).
DATA_SIDE = (
    "tokenizer.",
    "dims.token_dim",
    "optimizer.lr",
    "optimizer.lr_scaling",
    "optimizer.batch_size",
    "schedule.",
    "ema.",
)
WHERE = {
    "mini": ("mini", "image"),
    "converged": ("converged", "image"),
    "paper": ("paper", "image"),
    "pretrain": ("paper", "pretrain"),
}  # a departures-table profile name -> (profile, section)


def rule_template(key: str, where: str) -> str:
    """The recorded template the rule names for field ``key`` (``inet_baral_x`` or ``tiny_inet_nc_x``)."""
    return "tiny_inet_nc_x" if where == "image" and key.startswith(DATA_SIDE) else "inet_baral_x"


def departures(name: str) -> dict[str, tuple[str, object, object]]:
    """``{field: (template, template's value, ours)}`` for every recorded field where the composed
    configuration of ``name`` (a key of ``WHERE``) differs from the template the rule names for it."""
    profile, where = WHERE[name]
    spec, m_t = template("fields"), composed(profile, where)
    recorded = {t: fields(t) for t in ("inet_baral_x", "tiny_inet_nc_x")}
    out = {}
    for key in recorded["inet_baral_x"]:
        t = rule_template(key, where)
        ref, v = recorded[t][key]["value"], ours(key, spec[key], *m_t)
        if not _same(v, ref):
            out[key] = (t, ref, v)
    return out


def main(argv: list[str]) -> None:
    profiles = argv or ["mini", "converged", "paper"]
    print(table(profiles))
    print()
    print(pretrain_table())


if __name__ == "__main__":
    main(sys.argv[1:])
