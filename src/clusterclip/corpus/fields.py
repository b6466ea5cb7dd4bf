"""Kept fields (``--keep-fields``): the typed arrays of the corpus, derived from its parts' ``field:`` columns.

The readers keep each field's value as text (numbers as Python writes them); at the end of the corpus stage
(or of an add) every field becomes one array, whichever engine read it: a field whose values all parse as
numbers is numeric (``float64``, NaN: missing), any other categorical (``int32`` codes into its values, sorted,
-1: missing); ``FIELD:num`` / ``FIELD:cat`` declare the kind instead. An add keeps a field's kind and codes:
its new values get the next codes, so a categorical field's codes never change.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from clusterclip.contract.corpus import FIELD_COLUMN, field_files
from clusterclip.contract.corpus_texts import open_part
from clusterclip.corpus.records import field_spec
from clusterclip.errors import ClusterClipError
from clusterclip.store import RunDir, load_json, save_json, save_npy
from clusterclip.store.npy_rows import append_npy

MAX_CATEGORIES = 100_000
"""Most values a categorical field may have: a stratum per value must stay a stratum, not a document."""


def build_fields(run: RunDir, parts: Sequence[str], keep: Sequence[str], first: int = 0,
                 known: Mapping[str, dict[str, Any]] | None = None) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Write ``fields/<name>.npy`` and ``.json`` for every kept field from the corpus ``parts`` (run-relative);
    with ``known`` (the corpus record's ``fields``), append the documents from index ``first`` to the arrays the
    run has. Returns the artifacts written and each field's description for the corpus record."""
    artifacts: list[str] = []
    meta: dict[str, dict[str, Any]] = {}
    for item in keep:
        name, kind = field_spec(item)
        before = (known or {}).get(name)
        if before is not None:
            kind = "num" if before["kind"] == "numeric" else "cat"
        columns = list(_columns(run, parts, name))
        array_rel, meta_rel = field_files(name)
        old_cats = tuple(load_json(run.path(meta_rel)).get("categories") or ()) if before else ()
        values, cats = _typed(columns, name, kind, old_cats)
        if before is None:
            save_npy(run.path(array_rel), values)
        else:
            append_npy(run.path(array_rel), first, values)
        save_json(run.path(meta_rel), {"name": name, "kind": "numeric" if cats is None else "categorical",
                                       **({} if cats is None else {"categories": list(cats)})})
        meta[name] = _describe(run.path(array_rel), cats)
        artifacts += [array_rel, meta_rel]
    return artifacts, meta


def _columns(run: RunDir, parts: Sequence[str], name: str) -> Iterator[pa.Array]:
    for rel in parts:
        pf = open_part(run.path(rel))
        column = FIELD_COLUMN + name
        if column not in pf.schema_arrow.names:
            raise ClusterClipError(f"{run.path(rel)}: corpus part has no column {column!r}; re-run the corpus stage")
        yield pf.read(columns=[column]).column(0).combine_chunks()


def _typed(columns: list[pa.Array], name: str, kind: str,
           old_cats: tuple[str, ...]) -> tuple[np.ndarray, tuple[str, ...] | None]:
    if kind != "cat":
        numbers = _numeric(columns)
        if numbers is not None:
            return numbers, None
        if kind == "num":
            raise ClusterClipError(f"field {name!r} is numeric (--keep-fields {name}:num, or numeric when the run "
                                   f"was read) but holds {_first_text(columns)!r}; keep it as {name}:cat")
    return _categorical(columns, name, old_cats)


def _numeric(columns: list[pa.Array]) -> np.ndarray | None:
    """The values as float64 (NaN where missing), or None when some value is not a number."""
    out = []
    for col in columns:
        try:
            out.append(pc.fill_null(pc.cast(col, pa.float64()), np.nan).to_numpy(zero_copy_only=False))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
    return np.concatenate(out).astype(np.float64) if out else np.zeros(0)


def _first_text(columns: list[pa.Array]) -> str:
    for col in columns:
        for value in col.to_pylist():
            if value is not None:
                try:
                    float(value)
                except ValueError:
                    return value
    return ""


def _categorical(columns: list[pa.Array], name: str,
                 old_cats: tuple[str, ...]) -> tuple[np.ndarray, tuple[str, ...]]:
    seen: set[str] = set()
    for col in columns:
        seen.update(v for v in pc.unique(col).to_pylist() if v is not None)
    cats = (*old_cats, *sorted(seen - set(old_cats)))
    if len(cats) > MAX_CATEGORIES:
        raise ClusterClipError(f"field {name!r} has more than {MAX_CATEGORIES:,} distinct values: too many to "
                               "sample by (one stratum per value); keep a coarser field")
    value_set = pa.array(list(cats), pa.string())
    codes = [pc.fill_null(pc.index_in(col, value_set=value_set), -1).to_numpy(zero_copy_only=False)
             for col in columns]
    return (np.concatenate(codes) if codes else np.zeros(0)).astype(np.int32), cats


def _describe(path: Any, cats: tuple[str, ...] | None) -> dict[str, Any]:
    values = np.load(path, mmap_mode="r", allow_pickle=False)
    if cats is None:
        present = values[~np.isnan(values)]
        return {"kind": "numeric", "missing": int(values.size - present.size),
                "min": float(present.min()) if present.size else None,
                "max": float(present.max()) if present.size else None}
    return {"kind": "categorical", "missing": int((values < 0).sum()), "values": len(cats)}


def restore_fields(run: RunDir, fields: Mapping[str, dict[str, Any]], n_old: int) -> None:
    """Cut every kept field back to the ``n_old`` documents before an interrupted add, and a categorical field's
    values back to the ones it had (``fields``: the corpus record's from before the add)."""
    for name, info in fields.items():
        array_rel, meta_rel = field_files(name)
        try:
            values = np.load(run.path(array_rel), mmap_mode="r", allow_pickle=False)
            append_npy(run.path(array_rel), n_old, np.zeros(0, values.dtype))
            if info.get("kind") == "categorical":
                meta = load_json(run.path(meta_rel))
                save_json(run.path(meta_rel), {**meta, "categories": meta["categories"][:int(info["values"])]})
        except (OSError, ValueError, KeyError, ClusterClipError):
            continue
