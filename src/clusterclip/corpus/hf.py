"""The Hugging Face datasets format: a folder ``save_to_disk`` wrote, read in column batches by row number."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from clusterclip.corpus import limits
from clusterclip.corpus.format_base import ColumnFormat, Folder, WorkUnit
from clusterclip.corpus.records import ColumnBatch, ReadOptions, unreadable
from clusterclip.errors import BadRecordError, ClusterClipError

HF_METADATA = ("state.json", "dataset_info.json")


def is_hf_dataset_dir(path: Path) -> bool:
    """A folder ``save_to_disk`` wrote: a Dataset (``state.json``, ``dataset_info.json`` and ``.arrow``
    data) or a DatasetDict (``dataset_dict.json`` and a split folder that is such a Dataset)."""
    if (path / "dataset_dict.json").is_file():
        return any(is_hf_dataset_dir(split) for split in _subdirs(path))
    return all((path / name).is_file() for name in HF_METADATA) and any(path.glob("*.arrow"))


def has_hf_metadata(path: Path) -> bool:
    """Whether ``path`` holds the metadata files of ``save_to_disk`` (whatever its data files)."""
    return (path / "dataset_dict.json").is_file() or all((path / name).is_file() for name in HF_METADATA)


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir())
    except OSError as exc:
        raise unreadable(path, exc) from None


def hf_batches(path: Path, opts: ReadOptions) -> Iterator[ColumnBatch]:
    """The text, id and group columns of a dataset written by ``datasets.Dataset.save_to_disk`` (a
    DatasetDict uses ``opts.split``) in batches, each with the number of rows before it."""
    try:
        import datasets
    except ImportError:
        raise ClusterClipError(f"{path}: reading Hugging Face datasets needs `pip install "
                               "clusterclip[hf]`") from None
    try:
        ds = datasets.load_from_disk(str(path))
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        if isinstance(exc, OSError) and exc.errno not in (None, errno.ENOENT):
            raise unreadable(path, exc) from None
        raise ClusterClipError(f"{path}: not a readable Hugging Face dataset folder ({type(exc).__name__}: "
                               f"{exc}); save it again with save_to_disk") from None
    if isinstance(ds, datasets.DatasetDict):
        if opts.split not in ds:
            raise ClusterClipError(f"{path}: split {opts.split!r} not found (splits: {', '.join(ds)}); "
                                   "choose one with --split")
        ds = ds[opts.split]
    if opts.text_field not in ds.column_names:
        raise BadRecordError(str(path), None, f"no column {opts.text_field!r} (columns: "
                             f"{', '.join(ds.column_names)}); choose another with --text-field")
    columns = [c for c in opts.read_columns() if c in ds.column_names]
    ds = ds.select_columns(list(dict.fromkeys(columns)))
    row = 0
    try:
        for cols in ds.iter(batch_size=limits.BATCH_ROWS):
            yield str(path), row, cols
            row += len(cols[opts.text_field])
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise BadRecordError(str(path), row + 1, f"corrupt Hugging Face dataset data ({exc})") from None


class HfDataset(ColumnFormat):
    """A folder ``datasets`` wrote with ``save_to_disk`` (a Dataset, or a DatasetDict read at ``--split``); a
    null is an absent field in every column."""

    name = "hf"
    FOLDER = True
    EXPECTED = "a Hugging Face dataset folder (save_to_disk)"

    @classmethod
    def reads_folder(cls, folder: Folder) -> bool:
        return is_hf_dataset_dir(folder.path)

    @classmethod
    def folder_problem(cls, folder: Folder) -> str | None:
        if has_hf_metadata(folder.path):
            return (f"{folder.path}: looks like a Hugging Face dataset folder (save_to_disk metadata) but holds no "
                    ".arrow data files; save it again with save_to_disk")
        return None

    @classmethod
    def batches(cls, unit: WorkUnit, opts: ReadOptions) -> Iterator[ColumnBatch]:
        return hf_batches(unit.path, opts)
