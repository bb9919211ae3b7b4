"""The composer: ``python -m nac.compose [overrides...]`` rewrites params.yaml from ``conf/``
(e.g. ``profile=smoke``), as ``dvc exp run -S ...`` does itself. The composition is written to a
temporary file and validated in full (every section: ``validate_all``) before it replaces
params.yaml, so a bad override never leaves a broken params.yaml behind.

Stages validate only the sections they read (``nac.pipeline.params.load_params(check=...)``);
this module is the one place that imports every track's validator.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from dvc.utils.hydra import compose_and_dump
from hydra.errors import HydraException

from nac.pipeline.params import CONF_DIR, ParamsError, load_params, read_params, validate
from nac.tracks import common, fewshot_params, image

# Every section validator, in the order the composer runs them.
VALIDATORS = (
    image.validate,
    image.validate_prune,
    *(common.validator(t) for t in common.TRACK_RUNS),
    fewshot_params.validate,
)


def validate_all(params: dict[str, Any]) -> None:
    """Every section: the ones every stage reads (``validate``), then each track's."""
    validate(params)
    for check in VALIDATORS:
        check(params)


def load_all_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """params.yaml with every section validated."""
    return load_params(path, check=VALIDATORS)


def write_params(path: str | Path = "params.yaml", overrides: list[str] | None = None) -> Path:
    """Compose ``conf/`` with ``overrides`` (as DVC does: OmegaConf's YAML) into a temporary file
    next to ``path``, validate everything (``validate_all``) and only then replace ``path``
    atomically; on failure ``path`` is left as it was and the ``ParamsError`` (or Hydra's error
    for a bad override) propagates."""
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix or '.yaml'}", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)  # mkstemp's 0600 is not params.yaml's
    try:
        compose_and_dump(tmp, str(CONF_DIR), None, "config", str(CONF_DIR), list(overrides or []))
        validate_all(read_params(tmp, shown_as=path))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def groups(conf_dir: Path = CONF_DIR) -> dict[str, list[str]]:
    """The config groups (folders of ``conf/``) and their options, and each group's default."""
    return {d.name: sorted(p.stem for p in d.glob("*.yaml")) for d in sorted(conf_dir.iterdir()) if d.is_dir()}


def _defaults(conf_dir: Path = CONF_DIR) -> dict[str, str]:
    out = {}
    for entry in yaml.safe_load((conf_dir / "config.yaml").read_text(encoding="utf-8")).get("defaults", []):
        if isinstance(entry, dict):
            out.update({str(k): "none" if v is None else str(v) for k, v in entry.items()})
    return out


def _usage() -> str:
    defaults = _defaults()
    menu = "\n".join(
        f"  {g:<10} {', '.join(o)}"
        + (f"   (default: {defaults[g]})" if g in defaults else "   (optional: +" + g + "=<option>)")
        for g, o in groups().items()
    )
    return f"""usage: python -m nac.compose [--print] [override ...]

Compose conf/ (Hydra) into params.yaml, validate every section, and replace params.yaml only if valid
(as `dvc exp run -S ...` composes it). Overrides are Hydra's: a group choice (`profile=smoke`) or any
key (`image.train.epochs=2`).

config groups (conf/<group>/<option>.yaml):
{menu}
  (each profile picks its model: profile=smoke composes model=smoke unless model=... is given)

options:
  --print    print the composed params.yaml to stdout instead of writing it
  -h, --help show this message

examples:
  python -m nac.compose profile=smoke
  python -m nac.compose --print prior=ring_of_cliques image.train.epochs=20
"""


def main(argv: list[str] | None = None) -> None:
    """Recompose params.yaml (or ``--print`` it); an invalid composition leaves the old file and exits 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(args):
        print(_usage())
        return
    show = "--print" in args
    overrides = [a for a in args if a != "--print"]
    unknown = [a for a in overrides if a.startswith("-")]
    if unknown:
        print(f"error: unknown option {unknown[0]!r}\n\n{_usage()}", file=sys.stderr)
        raise SystemExit(2)
    try:
        if show:
            with tempfile.TemporaryDirectory() as tmp:
                path = write_params(Path(tmp) / "params.yaml", overrides)
                print(path.read_text(encoding="utf-8"), end="")
            return
        path = write_params("params.yaml", overrides)
    except (ParamsError, HydraException) as e:
        print(f"error: {e}\nparams.yaml was not changed ({' '.join(overrides) or 'defaults'})", file=sys.stderr)
        raise SystemExit(2) from None
    params = read_params(path)
    print(
        f"wrote {path} ({' '.join(overrides) or 'defaults'}): profile={params['profile']} "
        f"prior={params['prior']['name']}"
    )


if __name__ == "__main__":
    # Run the package's module, not this ``__main__`` copy: one ParamsError class for every check.
    from nac.compose import main as package_main  # the package module, not this __main__ copy (see above)

    package_main()
