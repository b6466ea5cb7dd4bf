"""Megatron reading a ``--format megatron`` export in plan order: :class:`PlanOrderGPTDataset`.

megatron-core's ``GPTDataset`` shuffles the documents of each epoch and then the samples, and builds
further epochs when more samples are asked for than one pass holds. On a clusterclip export that loses
the plan's order and, past one pass, brings every document back, breaking the plan's per-document cap
(``--max-repeat``). :class:`PlanOrderGPTDataset` is a ``GPTDataset`` that megatron's own
``BlendedMegatronDatasetBuilder`` builds, whose indices keep the export's order:

- documents in file order (the plan order), samples cut from that stream exactly as ``GPTDataset`` cuts
  them, and no shuffle: sample ``i`` holds the tokens ``i * seq_length`` ... of the export;
- a train split asking for more samples than one pass over the export holds is refused
  (:class:`~clusterclip.errors.ClusterClipError`) instead of starting a second pass;
- the split must be all-train (``"100,0,0"``): a validation tail cut out of the plan would shorten the
  trained plan and share the documents the plan repeats with the train set. Validation data comes as an
  export of its own through ``blend_per_split``; a validation/test dataset is read in order too, and may
  take more than one pass (it trains nothing);
- the prefix must be a clusterclip export: its ``export.json`` (format ``megatron``) must agree with
  ``data.bin``/``data.idx`` (sizes, rows), and the config's tokenizer with the export's EOS;
- indices are built in memory on every rank (one linear pass, no random state) and never cached:
  ``path_to_cache`` is neither read nor written, so a shuffled index that ``GPTDataset`` cached there is
  never picked up, and nothing is written beside the export.

Importing this module needs megatron-core (and torch); ``clusterclip.export`` itself does not import it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.contract.export import EXPORT_STAGE, ExportRecord, edited_message, file_sizes
from clusterclip.errors import ClusterClipError
from clusterclip.export.writers.megatron import MegatronWriter, megatron_imports
from clusterclip.store.paths import kind, read_bytes
from clusterclip.store.record import RecordError
from clusterclip.store.replica import local_path, where

try:
    with megatron_imports():
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
        from megatron.core.datasets.indexed_dataset import IndexedDataset
        from megatron.core.datasets.object_storage_utils import is_object_storage_path
        from megatron.core.datasets.utils import Split
except ImportError as exc:  # megatron-core or torch missing
    raise ClusterClipError(f"clusterclip.export.megatron_dataset needs megatron-core and torch ({exc}): "
                           "pip install 'clusterclip[export]' (see docs/export.md)") from exc

__all__ = ["PlanOrderGPTDataset", "read_export_record"]

RECORD = "export.json"
PREFIX = MegatronWriter.PREFIX
ONLY_TRAIN = [(0.0, 1.0), None, None]
"""The split matrix of ``split="100,0,0"``: every document in the train split."""
EXPORT_HINT = ("clusterclip export RUN --plan NAME --format megatron --tokenizer T --append-eos --dest DIR, "
               "then pass the prefix DIR/data")


def _refuse(prefix: object, problem: str) -> ClusterClipError:
    """One line naming the dataset prefix and the problem (with its way out)."""
    return ClusterClipError(f"PlanOrderGPTDataset {prefix}: {problem}")


def read_export_record(prefix: str | Path) -> ExportRecord:
    """The ``export.json`` of the export whose ``IndexedDataset`` prefix is ``prefix`` (``DIR/data``), as the
    export contract's typed record, checked to be a clusterclip ``--format megatron`` export whose
    ``data.bin``/``data.idx`` still have the recorded sizes: a foreign dataset or a file replaced since the
    export is refused, not read. ``prefix`` may be a URL (``s3://bucket/out/data``): the record is read from the
    store."""
    path = local_path(prefix)
    record_path = path.parent / RECORD
    if kind(record_path) != "file":
        raise _refuse(prefix, f"no {where(record_path)}: it reads a clusterclip export only ({EXPORT_HINT})")
    try:
        obj = json.loads(read_bytes(record_path).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _refuse(prefix, f"{where(record_path)} does not parse ({exc}); export again ({EXPORT_HINT})") from exc
    identity = obj.get("identity") if isinstance(obj, dict) else None
    fmt = identity.get("format") if isinstance(identity, dict) else None
    if not isinstance(obj, dict) or obj.get("stage") != EXPORT_STAGE or fmt != "megatron":
        raise _refuse(prefix, f"{where(record_path)} is not the record of a clusterclip --format megatron export "
                              f"(format: {fmt!r}); {EXPORT_HINT}")
    try:
        record = ExportRecord.from_json(obj, str(record_path), f"export again ({EXPORT_HINT})")
    except RecordError as exc:
        raise _refuse(prefix, str(exc)) from None
    if record.edited():
        raise _refuse(prefix, edited_message(record_path))
    if record.identity.get("blend"):
        raise _refuse(prefix, f"{where(record_path)} is a --blend export (one source per cluster): blend its sources "
                              "with GPTDataset and the weights of megatron_data_path.txt; PlanOrderGPTDataset reads a "
                              "plan-order export")
    if path.name != PREFIX:
        raise _refuse(prefix, f"the export's prefix is {path.parent / PREFIX}")
    _check_sizes(path, record)
    return record


def _check_sizes(path: Path, record: ExportRecord) -> None:
    """``data.bin`` and ``data.idx`` have the sizes ``export.json`` records (a cheap check, no hashing)."""
    for file, got, want in file_sizes(path.parent, record, (path.with_suffix(s).name for s in (".bin", ".idx"))):
        if want is None or got != want:
            command = " ".join(record.command or []).replace("{run}", str(path.parent))
            raise _refuse(path, f"{file} has {got} bytes, {RECORD} records {want}: it changed or is not this "
                                f"export's; export again ({command or EXPORT_HINT})")


def _check_tokenizer(prefix: str, record: ExportRecord, tokenizer: Any) -> None:
    """The config tokenizer's ``eod`` is the EOS the export appended (when both are known)."""
    recorded = record.identity.get("tokenizer") or {}
    eos = recorded.get("eos_id")
    try:
        eod = tokenizer.eod
    except (AttributeError, NotImplementedError):
        return
    if isinstance(eos, int) and isinstance(eod, int) and eos != eod:
        raise _refuse(prefix, f"the export ends documents with EOS id {eos} (tokenizer {recorded.get('name')!r}) "
                              f"but the config's tokenizer has eod {eod}: use the export's tokenizer")


def _check_split(prefix: str | None, n_docs: int, indices: np.ndarray | None, index_split: Split,
                 config: GPTDatasetConfig) -> None:
    """The dataset spans the whole export, is the only train source, and is not read from a cache."""
    if config.fast_cache_load:
        raise _refuse(prefix, "fast_cache_load reads cached indices unchecked; turn it off (the plan-order "
                              "indices are built in memory, one linear pass)")
    if config.blend is not None:
        if config.split_matrix != ONLY_TRAIN:
            raise _refuse(prefix, f"split {config.split!r} cuts validation/test documents out of the plan: that "
                                  "tail would be missing from training and share the documents the plan repeats "
                                  "with the train set; use split '100,0,0' and give validation data of its own "
                                  "(blend_per_split, e.g. --valid-data-path with another export)")
        prefixes = config.blend[0]
    else:
        prefixes = (config.blend_per_split[index_split.value] or [[]])[0]
    if index_split == Split.train and len(prefixes) > 1:
        raise _refuse(prefix, f"the train blend names {len(prefixes)} datasets, which megatron interleaves by "
                              "weight: the plan order is lost; train on one export (one plan over the whole "
                              "corpus)")
    whole = indices is not None and len(indices) == n_docs and (
        n_docs == 0 or (int(indices[0]) == 0 and int(indices[-1]) == n_docs - 1))
    if not whole:
        got = "none" if indices is None else f"{len(indices)}"
        raise _refuse(prefix, f"given {got} of the export's {n_docs} documents; it reads whole exports only "
                              "(split '100,0,0')")


class PlanOrderGPTDataset(GPTDataset):
    """A ``GPTDataset`` over a clusterclip export that keeps the plan order and never starts a second
    pass on the train split. Build it as ``GPTDataset`` is built:
    ``BlendedMegatronDatasetBuilder(PlanOrderGPTDataset, sizes, is_built_on_rank, config).build()`` with
    ``config.blend = [["DIR/data"], None]`` and ``config.split = "100,0,0"``."""

    def __init__(self, indexed_dataset: IndexedDataset, dataset_path: str | None, indexed_indices: np.ndarray,
                 num_samples: int | None, index_split: Split, config: GPTDatasetConfig) -> None:
        _check_split(dataset_path, len(indexed_dataset.sequence_lengths), indexed_indices, index_split, config)
        super().__init__(indexed_dataset, dataset_path, indexed_indices, num_samples, index_split, config)

    @staticmethod
    def build_low_level_dataset(dataset_path: str, config: GPTDatasetConfig) -> IndexedDataset:
        """The export's ``IndexedDataset``, after checking ``export.json`` against it and the tokenizer."""
        if config.mock or dataset_path is None:
            raise _refuse(dataset_path, f"no dataset prefix given (mock data); {EXPORT_HINT}")
        if is_object_storage_path(dataset_path) and config.object_storage_cache_path is None:
            raise _refuse(dataset_path, "an export in object storage is read by megatron's own S3 reader, which keeps "
                                        "data.idx in a local folder: set object_storage_cache_path (and "
                                        "mmap_bin_files=False)")
        record = read_export_record(dataset_path)
        _check_tokenizer(dataset_path, record, config.tokenizer)
        dataset = GPTDataset.build_low_level_dataset(dataset_path, config)
        rows = record.rows
        if len(dataset.sequence_lengths) != rows:
            raise _refuse(dataset_path, f"{dataset_path}.idx holds {len(dataset.sequence_lengths)} documents, "
                                        f"{RECORD} records {rows} rows: not this export's index; export again")
        return dataset

    def __len__(self) -> int:
        """The number of samples built (one pass on the train split, rounded down to whole samples)."""
        return int(self.sample_index.shape[0]) - 1

    def _build_document_sample_shuffle_indices(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Documents in file order, samples cut in order (megatron's own ``build_sample_idx``), the identity
        shuffle; refuses a train request past one pass. Built in memory, never cached."""
        from megatron.core.datasets import helpers

        tokens = self._get_num_tokens_per_epoch()
        length = self.config.sequence_length
        extra = int(self.config.add_extra_token_to_sequence)
        available = max(tokens - extra, 0) // length
        wanted = self.num_samples
        if tokens < 2:
            raise _refuse(self.dataset_path, f"the export holds {tokens} tokens, no sample; export a larger plan")
        epochs = 1
        if wanted is not None and wanted > available:
            if self.index_split == Split.train:
                raise _refuse(self.dataset_path, f"{wanted} samples of {length} tokens asked for, but one pass "
                                                 f"over this export holds {available} ({tokens} tokens) and a "
                                                 "second pass would read every document again, past the plan's "
                                                 f"per-document cap; train on at most {available} samples "
                                                 "(train_samples, or train_iters x global batch size) or export a "
                                                 "plan with a larger budget (clusterclip plan --budget N "
                                                 "--budget-unit tokens)")
            epochs = self._get_num_epochs(tokens)  # validation/test: passes in order, as GPTDataset counts them
        drop_last = self.index_split != Split.valid or self.config.drop_last_partial_validation_sequence
        document_index = np.tile(np.asarray(self.indices, dtype=np.int32), epochs)
        sample_index = helpers.build_sample_idx(self.dataset.sequence_lengths, document_index, length, epochs,
                                                tokens, drop_last, bool(extra))
        shuffle_index = np.arange(sample_index.shape[0] - 1, dtype=np.int64)
        return document_index, sample_index, shuffle_index
