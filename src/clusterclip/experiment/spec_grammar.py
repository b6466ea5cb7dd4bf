"""The grammar of ``--strategies``: every item names a strategy of the planner's registry
(:data:`clusterclip.plan.strategies.STRATEGIES`), one of the experiment's own names, or a finished plan, with
plan options, and becomes the specs (:mod:`.specs`) the experiment trains::

    strategies := item ("," item)*
    item       := NAME [":" first]       a strategy
                | KEY "=" VALUE          an option of the strategy before it
    first      := KEY "=" VALUE | VALUE  VALUE: the strategy's positional option (weights: its file; plan: the plan)
    VALUE      := text without commas | "[" text "]"   (strata=[cluster,quality:4], tier_weights=[0,1,1,2])

``NAME`` is a registry strategy (``random``, ``uniform``, ``temperature``, ``clusterclip``, ``weights``, and any
registered later), an experiment alias (``clusterclip-spread``, ``clusterclip-shuffled``), ``online[:bandit|
gradient]``, or ``plan`` (``plan:PATH``: a plan folder, its ``plan.npy``, or a run directory with one plan; its
recorded strategy and options). ``KEY`` is a plan option (a :class:`~clusterclip.plan.config.PlanConfig` setting
other than those the experiment fixes: budget, unit, epochs, seed, window), or ``name``, ``clusters`` (a run
directory whose clusters the plan is over, each training document taking its cluster there by id; ``split``:
the split's own k-means) and ``shuffle``. Options a spec does not give take the experiment's: ``max_repeat``
sweeps ``--max-repeats`` and ``duplicates`` ``--duplicate-modes`` for a strategy that caps by default, ``tau`` is
``--tau``. A bare name is the strategy with no options, so ``clusterclip`` sweeps the caps as it always did. The
per-document fields a stratified plan reads (``strata``, ``within``) are each training document's in the run
whose clusters it plans over (by id): the input's (``--quality-scorer`` scores it) or the ``clusters`` run's.
Documented in docs/experiment.md ("Strategy specs").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterclip.contract.cluster import CLUSTER_STAGE
from clusterclip.contract.corpus import CORPUS_STAGE
from clusterclip.contract.plan import PLAN_RECORD
from clusterclip.contract.plan_locate import read_record, resolve_plan_path
from clusterclip.corpus.quality import QUALITY_FIELD
from clusterclip.errors import ClusterClipError
from clusterclip.experiment.specs import (
    ONLINE_RULES,
    clusterclip_spec,
    online_spec,
    plain_spec,
    plan_fields,
    plan_options,
    temperature_spec,
)
from clusterclip.plan import strategies as registry
from clusterclip.plan.config import PlanConfig
from clusterclip.plan.weights_file import load_weights
from clusterclip.settings import SettingsError
from clusterclip.store import RunDir, config_hash

PLAN = "plan"
SPLIT = "split"
OWN = {"name": str, "clusters": str, "shuffle": bool}
"""The experiment's own keys: the strategy's name in the results, the clusters it plans over, the diagnostic
shuffle of its draws."""
POSITIONAL = {"weights": "weights", PLAN: "path"}
ALIASES: dict[str, dict[str, Any]] = {"clusterclip-spread": {"order": "spread"},
                                      "clusterclip-shuffled": {"shuffle": True}}
"""The experiment's names for ClusterClip variants (the planner's ``clusterclip`` with these options): their options."""
_CLUSTERCLIP_KEYS = {"max_repeat", "order", "shuffle", "duplicates"}


@dataclass(frozen=True)
class Item:
    """One parsed item: its head (a strategy, an alias, ``plan``) and options (typed; files not read yet)."""

    text: str
    head: str
    options: dict[str, Any]


def split_top(text: str) -> list[str]:
    """``text`` split at its commas outside brackets (``strata=[cluster,quality:4]`` is one piece)."""
    pieces, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c == "[") - (c == "]")
        if depth < 0:
            raise ValueError(f"{text!r}: a ']' closes no '['")
        if c == "," and not depth:
            pieces.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"{text!r}: a '[' is not closed")
    return [*pieces, text[start:]]


def join_items(text: str) -> tuple[str, ...]:
    """The command line's ``--strategies`` as items: a comma-separated ``KEY=VALUE`` continues the item before."""
    out: list[str] = []
    try:
        pieces = split_top(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    for piece in (p.strip() for p in pieces):
        if not piece:
            continue
        if out and _is_option(piece):
            out[-1] += "," + piece
        else:
            out.append(piece)
    return tuple(out)


def _is_option(piece: str) -> bool:
    return "=" in piece and ":" not in piece.split("=", 1)[0]


def names() -> list[str]:
    """Every strategy name an item may start with."""
    return list(dict.fromkeys([*registry.STRATEGIES, *ALIASES, *ONLINE_RULES, f"{PLAN}:PATH"]))


def parse_item(text: str) -> Item:
    """The item's head and typed options; a ``ValueError`` saying what is wrong (no file is read)."""
    if text in ONLINE_RULES:
        return Item(text, text, {})
    head_piece, *rest = split_top(text)
    if _is_option(head_piece):
        raise ValueError(f"{text!r}: an option before any strategy (write NAME:KEY=VALUE,KEY=VALUE)")
    head, sep, first = head_piece.partition(":")
    if head.split(":")[0] == "online":
        raise ValueError(f"{text!r}: online strategies are {', '.join(ONLINE_RULES)} and take no options (they "
                         "follow --max-repeats and --online-updates)")
    if head not in (*registry.STRATEGIES, *ALIASES, PLAN):
        raise ValueError(f"{text!r}: unknown strategy {head!r}; choose from {', '.join(names())}")
    options: dict[str, Any] = {}
    try:
        pairs = ([] if not sep else [_pair(head, first, positional=True)]) + [_pair(head, p) for p in rest]
        for key, value in pairs:
            if key in options:
                raise ValueError(f"{key} is given twice")
            options[key] = _value(key, value)
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    if head == PLAN and "path" not in options:
        raise ValueError(f"{text!r}: plan needs the plan: plan:PATH (a plan folder, its plan.json's folder or a run "
                         "directory with one plan)")
    base = ALIASES.get(head, {}).keys() & options.keys()
    if base:
        raise ValueError(f"{text!r}: {head} fixes {', '.join(sorted(base))}; use clusterclip:... to set it")
    return Item(text, head, options)


def _pair(head: str, piece: str, positional: bool = False) -> tuple[str, str]:
    key, eq, value = piece.partition("=")
    known = {*plan_fields(), *OWN}
    if eq and key.strip() in known:
        return key.strip(), value.strip()
    if positional and head in POSITIONAL:
        return POSITIONAL[head], piece.strip()
    if not eq:
        raise ValueError(f"{piece!r} is not KEY=VALUE" + (f" ({head} takes no positional option)" if positional
                                                            else "; a value with commas goes in brackets, "
                                                            "strata=[cluster,quality:4]"))
    raise ValueError(f"unknown option {key.strip()!r}; options: {', '.join(sorted(known))}")


def _value(key: str, text: str) -> Any:
    """An option's value from its text: by its declaration's parser, else its type (``none`` for None)."""
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1].strip()
    if key in ("weights", "path"):
        if not text:
            raise ValueError(f"{key} needs a file")
        return text
    if key in OWN:
        kind: Any = OWN[key]
        declared = None
    else:
        f = plan_fields()[key]
        declared = f.metadata.get("parse")
        kind = typing.get_type_hints(PlanConfig)[key]
    optional = type(None) in typing.get_args(kind)
    kind = next((a for a in typing.get_args(kind) if a is not type(None)), kind)
    if optional and text.lower() == "none":
        return None
    try:
        if declared is not None:
            return declared(text)
        if kind is bool:
            return {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}[text.lower()]
        value = kind(text) if kind in (int, float, str) else text
    except (KeyError, ValueError) as exc:
        what = {int: "an integer", float: "a number", bool: "true or false"}.get(kind, "valid")
        raise ValueError(f"{key}={text!r} is not {what}") from exc
    if key == "name" and (not value or any(c in value for c in "/,:")):
        raise ValueError(f"name={text!r} must be non-empty, without '/', ',' or ':'")
    return value


def strategy_of(item: Item) -> str | None:
    """The registry strategy an item plans with; None for ``plan:`` (known once its plan is read)."""
    if item.head in ONLINE_RULES or item.head in ALIASES:
        return "clusterclip"
    return None if item.head == PLAN else item.head


def sweeps_caps(item: Item) -> bool:
    """Whether an item trains one run per ``--max-repeats`` value (a capped strategy with no ``max_repeat``)."""
    strategy = strategy_of(item)
    return strategy is not None and "max_repeat" not in item.options and \
        registry.STRATEGIES[strategy].DEFAULT_MAX_REPEAT is not None


def check_items(items: Any) -> str | None:
    """The :func:`~clusterclip.settings.setting` check of ``strategies``: every item parses (no file is read)."""
    if not isinstance(items, (tuple, list)) or not items:
        return f"must be a non-empty list, got {items!r}"
    for text in items:
        try:
            _check_plan(parse_item(str(text)))
        except ValueError as exc:
            return f"item {exc}"
    return None


def _check_plan(item: Item) -> None:
    """The planner's checks of an item's plan options (a weights file stands for itself: it is read later)."""
    strategy = strategy_of(item)
    if strategy is None or item.head in ONLINE_RULES:
        return
    opts = {k: v for k, v in {**ALIASES.get(item.head, {}), **item.options}.items() if k in plan_fields()}
    if "weights" in opts:
        opts["weights"] = ((0, 1.0),)
    try:
        planned = PlanConfig(strategy=strategy, **opts).to_json()
    except SettingsError as exc:
        hint = " (weights:FILE)" if exc.param == "weights" else ""
        raise ValueError(f"{item.text!r}: {exc}{hint}") from None
    fields = plan_fields()
    idle = [k for k in opts if k not in ("max_repeat", "duplicates", "weights") and opts[k] != fields[k].default
            and _planned_without(strategy, opts, k) == planned]
    if idle:
        raise ValueError(f"{item.text!r}: {', '.join(idle)} does not apply to strategy {strategy!r} (its plan is the "
                         "same without it)")


def _planned_without(strategy: str, opts: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The normalised plan of ``opts`` without ``key``; None when the others need it (tier_weights without strata)."""
    try:
        return PlanConfig(strategy=strategy, **{j: v for j, v in opts.items() if j != key}).to_json()
    except SettingsError:
        return None


# ------------------------------------------------------------------------------------------- specs


def resolve(text: str, cfg: Any) -> list[dict[str, Any]]:
    """The specs of one item under the experiment settings ``cfg`` (``max_repeats``, ``duplicates``, ``tau``,
    ``online_updates``): files and plans are read here. Raises a ``SettingsError`` of ``strategies``."""
    if text in ONLINE_RULES:
        return [online_spec(ONLINE_RULES[text], r, cfg.online_updates) for r in cfg.max_repeats]
    item = parse_item(text)
    try:
        strategy, options, source = _source(item)
        return _specs(strategy, options, source, cfg)
    except (ClusterClipError, OSError) as exc:
        raise SettingsError("strategies", f"item {text!r}: {exc}", type(cfg)) from None


def _source(item: Item) -> tuple[str, dict[str, Any], Path | None]:
    """The strategy, its options and the run directory of a ``plan:`` item (its options under the item's)."""
    opts = dict(item.options)
    strategy = strategy_of(item)
    if strategy is not None:
        return strategy, {**ALIASES.get(item.head, {}), **opts}, None
    order = resolve_plan_path(opts.pop("path"))
    record = read_record(order.parent / PLAN_RECORD)
    if record is None:
        raise ClusterClipError(f"{order.parent}: no readable {PLAN_RECORD}")
    pc = PlanConfig.from_recorded(record.config)
    fields = plan_fields()
    recorded = {k: getattr(pc, k) for k, f in fields.items() if getattr(pc, k) != f.default}
    if pc.effective_max_repeat is not None:
        recorded["max_repeat"] = pc.effective_max_repeat
    recorded.setdefault("clusters", str(order.parent.parent.parent))
    return pc.strategy, {**recorded, **opts}, order.parent


def _specs(strategy: str, opts: dict[str, Any], source: Path | None, cfg: Any) -> list[dict[str, Any]]:
    kind = registry.STRATEGIES[strategy]
    capped = kind.DEFAULT_MAX_REPEAT is not None
    caps = [opts.pop("max_repeat")] if "max_repeat" in opts else list(cfg.max_repeats) if capped else [None]
    dups = [opts.pop("duplicates")] if "duplicates" in opts else list(cfg.duplicates) if capped else ["none"]
    if kind.USES_TAU:
        opts.setdefault("tau", cfg.tau)
    name, clusters, shuffle = opts.pop("name", None), opts.pop("clusters", SPLIT), opts.pop("shuffle", False)
    weights = opts.pop("weights", None)
    if isinstance(weights, str):
        weights = load_weights(weights)
    base: dict[str, Any] = {"strategy": strategy, **opts}
    if weights is not None:
        base["weights"] = [[int(c), float(w)] for c, w in weights]
    if clusters != SPLIT:
        base["clusters"] = str(clusters)
        base["clusters_identity"] = RunDir(clusters).output_hash(CLUSTER_STAGE)
    out = []
    for cap in caps:
        for dup in dups:
            spec = {**base, **({} if cap is None else {"max_repeat": int(cap)}),
                    **({} if dup == "none" else {"duplicates": dup}), **({"shuffle": True} if shuffle else {})}
            spec.update(_fields_source(PlanConfig(**plan_options(spec)).field_names(), spec.get("clusters"), cfg))
            out.append({"name": _name(spec, source, name, len(caps) * len(dups) > 1), **spec})
    return [_legacy(s) for s in out]


def _fields_source(names: list[str], clusters: str | None, cfg: Any) -> dict[str, Any]:
    """What a spec reading the per-document fields ``names`` records of where they come from, so that a finished run
    is reused only for the same values: another run's corpus stage, or the quality scorer of the input."""
    if names and clusters is not None:
        return {"fields_identity": RunDir(clusters).output_hash(CORPUS_STAGE)}
    scorer = getattr(cfg, "quality_scorer", None)
    return {"quality_scorer": scorer} if scorer is not None and QUALITY_FIELD in names else {}


def _name(spec: dict[str, Any], source: Path | None, given: str | None, sweep: bool) -> str:
    """The spec's name: ``given`` (with ``-R<cap>[-dup]`` in a sweep), the experiment's own name for a plain
    ClusterClip, temperature or option-free strategy over the split's clusters, else ``<strategy>-<digest>``
    (``plan-<strategy>-<digest>`` for a plan) of everything it plans."""
    dup = spec.get("duplicates")
    suffix = f"-R{spec.get('max_repeat')}" + (f"-{dup.replace('-', '')}" if dup else "")
    if given is not None:
        return given + (suffix if sweep else "")
    keys = set(spec) - {"strategy"}
    if source is None and "clusters" not in spec:
        if spec["strategy"] == "clusterclip" and keys <= _CLUSTERCLIP_KEYS:
            return clusterclip_spec(spec["max_repeat"], spec.get("order", "equal-rate"), spec.get("shuffle", False),
                                    spec.get("duplicates", "none"))["name"]
        if spec["strategy"] == "temperature" and keys == {"tau"}:
            return temperature_spec(spec["tau"])["name"]
        if not keys:
            return spec["strategy"]
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]
    return f"{PLAN + '-' if source is not None else ''}{spec['strategy']}-{digest}"


def _legacy(spec: dict[str, Any]) -> dict[str, Any]:
    """The experiment's own spec (same keys as before the grammar) when the item is one of its old names."""
    if spec["name"] == spec["strategy"] and set(spec) == {"name", "strategy"}:
        return plain_spec(spec["strategy"])
    if spec["strategy"] == "temperature" and set(spec) == {"name", "strategy", "tau"} and \
            spec["name"] == temperature_spec(spec["tau"])["name"]:
        return temperature_spec(spec["tau"])
    if spec["strategy"] == "clusterclip" and set(spec) - {"name", "strategy"} <= _CLUSTERCLIP_KEYS:
        legacy = clusterclip_spec(spec["max_repeat"], spec.get("order", "equal-rate"), spec.get("shuffle", False),
                                  spec.get("duplicates", "none"))
        if legacy["name"] == spec["name"]:
            return legacy
    return spec


def spec_id(spec: dict[str, Any]) -> str:
    """A hash of what a spec plans (its name left out): a finished run is reused only under the same one."""
    return config_hash({k: v for k, v in spec.items() if k != "name"})


def item_of(spec: dict[str, Any]) -> str | None:
    """The ``--strategies`` item that trains ``spec`` (a grid candidate of ``tune``; with its ``name`` when that is
    not the one the item would get), or None when its options are not a spec's (a weight candidate's group weights
    mean something only on the splits of its search)."""
    if "group_weights" in spec or "online" in spec or "clusters" in spec or "weights" in spec:
        return None
    options = {k: v for k, v in plan_options(spec).items() if k != "strategy"}
    if spec.get("shuffle"):
        options["shuffle"] = "true"
    bare = {k: v for k, v in spec.items() if k != "name"}
    if "name" in spec and spec["name"] != _name(bare, None, None, False):
        options["name"] = spec["name"]
    if not options:
        return spec["strategy"]
    shown = [f"{k}={v:g}" if isinstance(v, float) else f"{k}=[{v}]" if "," in str(v) else f"{k}={v}"
             for k, v in options.items()]
    return f"{spec['strategy']}:" + ",".join(shown)
