"""The ordered registry of claims. Each claim is one function, registered by name with ``@claim``:

    @claim("iid_gain", source="§4.1 (Table 1)", statement="NACs are better in distribution than Perceiver IO",
           paper=lambda c: f"Table 1 IID Acc@1: ...", measure=lambda c: f"d = IID Acc@1 {c.head} − ...")
    def iid_gain(c: Context) -> dict: ...

The function gets the ``Context`` (params, the metrics reader, the headline NAC, the prior NACs of
the ladder) and returns the claim's result (``ours``, ``estimate``, ``lo``, ``hi``, ``n``,
``verdict``, ``reason``), or raises ``Missing`` ("not measured"). The text fields are strings, or
functions of the context where they name configured runs or published numbers.

A claim registered with ``per=`` (a function of params returning keys) stands for one claim per
key, ``<name>_<key>``; its function and text functions get the key as a second argument.

Report order: by topic module in ``TOPICS``, then by definition order inside a module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

from nac.graphs import PRIORS
from nac.report.claims import gate
from nac.report.claims.metrics import Metrics, Missing
from nac.report.claims.power import annotate
from nac.report.claims.rules import NOT_MEASURED, UNDECIDED
from nac.report.published import TABLE1

FIELDS = (
    "id",
    "source",
    "claim",
    "paper",
    "measure",
    "ours",
    "estimate",
    "lo",
    "hi",
    "n",
    "verdict",
    "reason",
    "delta",
    "deciding",
    "power",
    "parts",
    "sensitivity",
)
JSON_FIELDS = ("deciding", "power", "parts", "sensitivity")  # dicts and lists: JSON text in claims.csv
TOPICS = ("image", "mechanism", "prune", "fewshot", "tracks", "nlvr", "baselines")
IID, OOD = 0, 2  # columns of published.TABLE1

Text = str | Callable[..., str]


@dataclass
class Context:
    """What every claim reads: params, the metrics, and the image ladder's names derived once."""

    params: dict
    m: Metrics
    prior: str = field(init=False)
    head: str = field(init=False)
    ladder: list[str] = field(init=False)
    priors: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.prior = self.params["prior"]["name"]
        self.head = f"nac-{self.prior}"
        self.ladder = self.params["image"]["ladder"]
        # the prior NACs of the ladder (not their controls), in nac.graphs.PRIORS order
        self.priors = [f"nac-{pr}" for pr in PRIORS if f"nac-{pr}" in self.ladder]

    @staticmethod
    def paper(run: str, col: int) -> float:
        """Table 1's published number of ``run`` (``IID`` or ``OOD`` column), NaN if it has none."""
        return TABLE1.get(run, (math.nan,) * 4)[col]


@dataclass(frozen=True)
class Claim:
    name: str
    source: Text
    statement: Text
    paper: Text
    measure: Text
    evaluate: Callable[..., dict]
    per: Callable[[dict], list[str]] | None = None
    topic: str = ""
    seq: int = 0
    delta: Text = ""  # one line: why the claim's δ (or threshold) is what it is
    effect: Callable[..., float] | None = None  # the paper's effect, in the claim's units, where it gives one
    when: Callable[[dict], bool] | None = None  # the profiles the claim exists in (None: every one)

    def ids(self, params: dict) -> list[tuple[str, tuple[str, ...]]]:
        """``(claim id, extra arguments)`` of each claim this registration stands for."""
        if self.when is not None and not self.when(params):
            return []
        if self.per is None:
            return [(self.name, ())]
        return [(f"{self.name}_{key}", (key,)) for key in self.per(params)]

    def text(self, value: Text, c: Context, args: tuple[str, ...]) -> str:
        return value if isinstance(value, str) else value(c, *args)

    def row(self, c: Context, cid: str, args: tuple[str, ...]) -> dict:
        """The row of claim ``cid``: its text fields, then its result (or 'not measured')."""
        try:
            res = self.evaluate(c, *args)
        except Missing as e:
            res = {
                "ours": "—",
                "estimate": None,
                "lo": None,
                "hi": None,
                "n": 0,
                "verdict": NOT_MEASURED,
                "reason": f"not measured: {e}",
                "parts": [],
                "deciding": None,
            }
        effect = None if self.effect is None else self.effect(c, *args)
        if res["verdict"] != NOT_MEASURED:
            annotate(res, effect)
            if res.get("power", {}).get("why"):
                res["reason"] = f"{res['reason']}; {res['power']['why']}"
        else:
            res["power"] = {}
        out = {
            "id": cid,
            "source": self.text(self.source, c, args),
            "claim": self.text(self.statement, c, args),
            "paper": self.text(self.paper, c, args),
            "measure": self.text(self.measure, c, args),
            "delta": self.text(self.delta, c, args),
            **res,
        }
        return {k: out.get(k) for k in FIELDS} | {k: v for k, v in out.items() if k not in FIELDS}


_REGISTRY: dict[str, Claim] = {}
_seq = count()


def claim(
    name: str,
    *,
    source: Text,
    statement: Text,
    paper: Text,
    measure: Text,
    per: Callable[[dict], list[str]] | None = None,
    delta: Text,
    effect: Callable[..., float] | None = None,
    when: Callable[[dict], bool] | None = None,
) -> Callable[[Callable[..., dict]], Callable[..., dict]]:
    """Register the decorated function as the claim ``name`` (in a topic module of ``TOPICS``).
    ``delta``: one line saying why its δ (or threshold) is what it is (the paper's effect, a practical
    threshold or the noise floor: ``nac.report.claims.deltas``); ``effect``: the paper's effect in the
    claim's units (the power's effect of interest, ``nac.report.claims.power``); ``when``: the
    profiles (a function of params) the claim exists in."""

    def register(fn: Callable[..., dict]) -> Callable[..., dict]:
        topic = fn.__module__.rsplit(".", 1)[-1]
        if topic not in TOPICS:
            raise ValueError(f"claim {name!r} defined in {fn.__module__}, not in a topic module {TOPICS}")
        if name in _REGISTRY:
            raise ValueError(f"claim {name!r} registered twice")
        seq = next(_seq)
        _REGISTRY[name] = Claim(name, source, statement, paper, measure, fn, per, topic, seq, delta, effect, when)
        return fn

    return register


def registered() -> list[Claim]:
    """Every registered claim, in report order."""
    return sorted(_REGISTRY.values(), key=lambda c: (TOPICS.index(c.topic), c.seq))


def _expanded(params: dict) -> Iterator[tuple[Claim, tuple[str, ...], str]]:
    for c in registered():
        for cid, args in c.ids(params):
            yield c, args, cid


def claim_ids(params: dict) -> tuple[str, ...]:
    """Every claim id for ``params``, in report order (``CLAIM_IDS`` plus ``fewshot_<target>``)."""
    return tuple(cid for _, _, cid in _expanded(params))


def evaluate_claims(params: dict, metrics: Path | str = Path("metrics"), flags: list | None = None) -> list[dict]:
    """One dict (keys ``FIELDS``) per claim of ``claim_ids(params)``, in that order. ``flags``: the run
    gate's flagged runs (``gate.judge``; judged here from the training records when None): a claim that
    read one is judged again without its seed, its ``sensitivity`` (None where it read none)."""
    if flags is None:
        flags, _ = gate.judge(gate.training_records(metrics, params))
    flagged = {f.key: f for f in flags}
    m = Metrics(Path(metrics), params)
    c = Context(params, m)
    rows = []
    for cl, args, cid in _expanded(params):
        m.touched = set()
        row = cl.row(c, cid, args)
        hit = sorted(k for k in m.touched if k in flagged)
        row["sensitivity"] = _without(params, metrics, cl, cid, args, hit) if hit and row["n"] else None
        rows.append(row)
    assert tuple(r["id"] for r in rows) == claim_ids(params), "claim list and claim_ids disagree"
    return rows


def _without(params: dict, metrics: Path | str, cl: Claim, cid: str, args: tuple, hit: list) -> dict:
    """Claim ``cid`` judged again without the seeds of the flagged runs ``hit`` (every arm of it: a
    paired claim stays paired)."""
    m = Metrics(Path(metrics), params)
    m.seeds = [s for s in m.seeds if s not in {seed for _, _, seed in hit}]
    # fewer than 2 seeds left: no interval, and a single measurement must not decide a claim judged over seeds
    row = cl.row(Context(params, m), cid, args) if len(m.seeds) >= 2 else {"verdict": UNDECIDED, "n": len(m.seeds)}
    out = {"without": [f"{g} {run} seed {seed}" for g, run, seed in hit], "seeds": m.seeds}
    return out | {k: row.get(k) for k in ("ours", "estimate", "lo", "hi", "n", "verdict")}
