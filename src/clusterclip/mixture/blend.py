"""Chosen mixture weights for trainers that blend sources themselves (no plan file).

Each cluster (or super-cluster) is one *source*: a data prefix (Megatron's ``.bin``/``.idx`` pair
without its extension) or a list of token files (OLMo-core). Two outputs:

* :func:`megatron_data_path`: the ``--data-path`` argument of Megatron-LM, ``weight prefix`` pairs,
  one pair per line (Megatron normalises the weights itself; the file can be given to
  ``--data-args-path`` or expanded into ``--data-path $(cat FILE)``).
* :func:`olmo_source_mixture`: a dict shaped like OLMo-core's ``SourceMixtureDatasetConfig``: one
  ``{source_name, target_ratio, paths, <repetition field>, max_source_fraction}`` per source with positive
  weight, in one of two layouts (``layout``): ``source_configs`` plus the optional ``max_tokens``,
  ``sequence_length`` and ``seed`` (earlier releases, which also take the token files' ``dtype``), or
  ``source_list: {sources}`` plus the optional ``requested_tokens`` and ``seed`` (OLMo-core 3.0, which takes
  ``global_batch_size`` beside them, and the dtype and sequence length from its dataset config). OLMo-core
  is not imported here (it is not in the project's environment); the field names follow its
  ``olmo_core.data.source_mixture`` module (``max_repetition_ratio``; see ``repetition_field`` for another
  name). The ``source_list`` layout was checked once, by hand, with OLMo-core 3.0.0's own
  ``SourceMixtureDatasetConfig.build``.

The per-document cap of a ClusterClip plan has no equivalent in either trainer: a source-level
repetition limit ``R`` bounds the *average* repetition of a source's tokens, not each document's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from clusterclip.mixture.swarm import MixtureError

REPETITION_FIELDS = ("max_repetition_ratio", "max_repetitions")
"""Names of OLMo-core's per-source repetition limit (``max_repetition_ratio`` in its releases up to 3.0)."""
LAYOUTS = ("source_configs", "source_list")
"""Layouts of OLMo-core's ``SourceMixtureDatasetConfig``: earlier releases, and 3.0."""


def _normalised(weights: Mapping[str, float], sources: Mapping[str, Any]) -> dict[str, float]:
    """Positive weights summing to 1, in the order of ``weights``; every one needs a source."""
    bad = [k for k, w in weights.items() if not (isinstance(w, (int, float)) and math.isfinite(w) and w >= 0)]
    if bad:
        raise MixtureError(f"weight of {bad[0]!r} must be a finite number >= 0; got {weights[bad[0]]!r}")
    missing = [k for k, w in weights.items() if w > 0 and k not in sources]
    if missing:
        raise MixtureError(f"no data prefix or paths for source(s) {missing[:5]} with positive weight")
    total = float(sum(weights.values()))
    if total <= 0:
        raise MixtureError("every weight is 0: nothing to blend")
    return {k: float(w) / total for k, w in weights.items() if w > 0}


def megatron_data_path(weights: Mapping[str, float], prefixes: Mapping[str, str]) -> str:
    """``weight prefix`` lines (weights normalised, ``repr`` precision; zero weights left out)."""
    w = _normalised(weights, prefixes)
    for k in w:
        if not prefixes[k] or any(c.isspace() for c in str(prefixes[k])):
            raise MixtureError(f"data prefix of {k!r} is empty or holds whitespace: {prefixes[k]!r}")
    return "".join(f"{w[k]!r} {prefixes[k]}\n" for k in w)


def olmo_source_mixture(weights: Mapping[str, float], paths: Mapping[str, Sequence[str]], *,
                        max_repetition: float | Mapping[str, float] | None = None, max_tokens: int | None = None,
                        sequence_length: int | None = None, seed: int | None = None,
                        repetition_field: str = REPETITION_FIELDS[0], layout: str = LAYOUTS[0]) -> dict[str, Any]:
    """An OLMo-core source-mixture config (see the module docstring for its fields and ``layout``s);
    ``max_repetition`` is one limit for every source or one per source name."""
    if repetition_field not in REPETITION_FIELDS:
        raise MixtureError(f"repetition_field must be one of {', '.join(REPETITION_FIELDS)}; got {repetition_field!r}")
    if layout not in LAYOUTS:
        raise MixtureError(f"layout must be one of {', '.join(LAYOUTS)}; got {layout!r}")
    w = _normalised(weights, paths)
    configs = []
    for k, ratio in w.items():
        files = [str(p) for p in paths[k]]
        if not files:
            raise MixtureError(f"source {k!r} has no paths")
        entry: dict[str, Any] = {"source_name": str(k), "target_ratio": ratio, "paths": files,
                                 "max_source_fraction": 1.0}
        limit = max_repetition.get(k) if isinstance(max_repetition, Mapping) else max_repetition
        if limit is not None:
            entry[repetition_field] = float(limit)
        configs.append(entry)
    if layout == "source_list":
        if sequence_length is not None:
            raise MixtureError("sequence_length is no field of OLMo-core's source_list layout: give it to the "
                               "dataset config")
        sized = {"requested_tokens": max_tokens, "seed": seed}
        return {"source_list": {"sources": configs}, **{k: int(v) for k, v in sized.items() if v is not None}}
    out: dict[str, Any] = {"source_configs": configs}
    extra = {"max_tokens": max_tokens, "sequence_length": sequence_length, "seed": seed}
    out.update({k: int(v) for k, v in extra.items() if v is not None})
    return out


def write_blend(out_dir: str | Path, weights: Mapping[str, float], prefixes: Mapping[str, str],
                paths: Mapping[str, Sequence[str]] | None = None, **olmo: Any) -> dict[str, Path]:
    """Write ``megatron_data_path.txt`` and ``olmo_source_mixture.json`` into ``out_dir``; ``paths``
    defaults to ``prefix + '.npy'`` per source. Returns the files written by kind."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"megatron": out / "megatron_data_path.txt", "olmo": out / "olmo_source_mixture.json"}
    files["megatron"].write_text(megatron_data_path(weights, prefixes), encoding="utf-8")
    paths = paths if paths is not None else {k: [f"{p}.npy"] for k, p in prefixes.items()}
    config = olmo_source_mixture(weights, paths, **olmo)
    files["olmo"].write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return files
