"""The Hugging Face datasets format: a folder ``save_to_disk`` wrote, read in column batches by row number."""

from __future__ import annotations

import errno
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from clusterclip.corpus import limits
from clusterclip.corpus.format_base import ColumnFormat, Folder, WorkUnit
from clusterclip.corpus.records import ColumnBatch, ReadOptions, unreadable
from clusterclip.errors import BadRecordError, ClusterClipError
from clusterclip.settings import option
from clusterclip.store.paths import files_below, is_remote, open_bytes, read_bytes

HF_METADATA = ("state.json", "dataset_info.json")


def is_hf_dataset_dir(path: Path) -> bool:
    """A folder ``save_to_disk`` wrote: a Dataset (``state.json``, ``dataset_info.json`` and ``.arrow``
    data) or a DatasetDict (``dataset_dict.json`` and a split folder that is such a Dataset)."""
    names = _remote_names(path)
    if names is not None:
        if "dataset_dict.json" in names:
            return any(is_hf_dataset_dir(split) for split in _subdirs(path))
        return all(name in names for name in HF_METADATA) and any(n.endswith(".arrow") for n in names)
    if (path / "dataset_dict.json").is_file():
        return any(is_hf_dataset_dir(split) for split in _subdirs(path))
    return all((path / name).is_file() for name in HF_METADATA) and any(path.glob("*.arrow"))


def has_hf_metadata(path: Path) -> bool:
    """Whether ``path`` holds the metadata files of ``save_to_disk`` (whatever its data files)."""
    names = _remote_names(path)
    if names is not None:
        return "dataset_dict.json" in names or all(name in names for name in HF_METADATA)
    return (path / "dataset_dict.json").is_file() or all((path / name).is_file() for name in HF_METADATA)


def _remote_names(path: Path) -> set[str] | None:
    """The names of the objects directly below a store prefix ``path``; None for a local folder."""
    remote = files_below(path)
    return None if remote is None else {p.name for p in remote if p.parent == path}


def _subdirs(path: Path) -> list[Path]:
    remote = files_below(path)
    if remote is not None:
        return sorted({path / p.relative_to(path).parts[0] for p in remote if p.parent != path})
    try:
        return sorted(p for p in path.iterdir() if p.is_dir())
    except OSError as exc:
        raise unreadable(path, exc) from None


def hf_batches(path: Path, opts: ReadOptions) -> Iterator[ColumnBatch]:
    """The text, id and group columns of a dataset written by ``datasets.Dataset.save_to_disk`` (a
    DatasetDict uses ``opts.split``) in batches, each with the number of rows before it; one in a store is
    streamed (:func:`remote_hf_batches`)."""
    if is_remote(path):
        yield from remote_hf_batches(path, opts)
        return
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
                                   f"choose one with {option(type(opts), 'split')}")
        ds = ds[opts.split]
    if not opts.read_all_columns(ds.column_names):
        if opts.text_field not in ds.column_names:
            raise BadRecordError(str(path), None, f"no column {opts.text_field!r} (columns: "
                                 f"{', '.join(ds.column_names)}); choose another with "
                                 f"{option(type(opts), 'text_field')}")
        ds = ds.select_columns(list(dict.fromkeys(c for c in opts.read_columns() if c in ds.column_names)))
    row = 0
    try:
        for cols in ds.iter(batch_size=limits.BATCH_ROWS):
            yield str(path), row, cols
            row += len(next(iter(cols.values()), []))
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise BadRecordError(str(path), row + 1, f"corrupt Hugging Face dataset data ({exc})") from None


def remote_hf_batches(path: Path, opts: ReadOptions) -> Iterator[ColumnBatch]:
    """:func:`hf_batches` of a ``save_to_disk`` folder in a store, streamed: its ``.arrow`` files (Arrow IPC streams,
    rows in the dataset's order, in ``state.json``'s order) read batch by batch, never downloaded whole (``datasets``
    would copy the whole folder to local disk first)."""
    source = str(path)
    try:
        if "dataset_dict.json" in (_remote_names(path) or set()):
            splits = json.loads(read_bytes(path / "dataset_dict.json")).get("splits", [])
            if opts.split not in splits:
                raise ClusterClipError(f"{path}: split {opts.split!r} not found (splits: {', '.join(splits)}); "
                                       "choose one with --split")
            path = path / opts.split
        files = [f["filename"] for f in json.loads(read_bytes(path / "state.json"))["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ClusterClipError(f"{source}: not a readable Hugging Face dataset folder ({type(exc).__name__}: "
                               f"{exc}); save it again with save_to_disk") from None
    row, columns = 0, None
    try:
        for name in files:
            with open_bytes(path / name) as fh, pa.ipc.open_stream(fh) as reader:
                names = reader.schema.names
                if opts.text_field not in names:
                    raise BadRecordError(source, None, f"no column {opts.text_field!r} (columns: "
                                         f"{', '.join(names)}); choose another with --text-field")
                columns = columns or list(dict.fromkeys(
                    c for c in (opts.text_field, opts.id_field, opts.group_field) if c and c in names))
                for rb in reader:
                    yield source, row, rb.select(columns).to_pydict()
                    row += rb.num_rows
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise BadRecordError(source, row + 1, f"corrupt Hugging Face dataset data ({exc})") from None


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
