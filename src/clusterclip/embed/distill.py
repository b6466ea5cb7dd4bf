"""Distilling all-MiniLM-L6-v2 into a model2vec static model, and where distilled models are cached.

Recipe (as model2vec's ``distill``, reimplemented so ``model2vec[distill]`` and its pins are not needed):
every vocabulary token ``t`` is run through the transformer as ``[CLS] t [SEP]`` and the three output
positions are mean-pooled (MiniLM's own pooling, applied to a one-token text); the vectors are centred and
PCA-reduced to ``dim``; row ``r`` (in vocabulary order, which for this WordPiece vocabulary roughly follows
frequency) is scaled by the SIF weight ``a / (a + p_r)`` with Zipf probabilities ``p_r ~ 1 / (r + 2)``, so
frequent tokens count less in a document mean. ``[unusedN]`` and special tokens get zero rows.

Extra words (a corpus vocabulary: normalised words that are not MiniLM tokens) are added to the WordPiece
vocabulary after its last id, in the given order, as model2vec does with a custom vocabulary: each word is
run through MiniLM as its own text (``[CLS]`` + its word pieces + ``[SEP]``, mean-pooled), its vector joins
the token vectors before the PCA, and it takes the Zipf ranks after them. WordPiece matches the longest
vocabulary entry first, so the tokenizer then keeps those words whole and splits other words as before.

The folder is built under a temporary name beside its destination and renamed into place, so a killed
distillation never leaves a half-written model.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.embed.base import MINILM_ID, digest, hf_progress, minilm_path, set_offline
from clusterclip.embed.minilm import MiniLMEmbedder
from clusterclip.errors import ClusterClipError
from clusterclip.progress import progress_bar, progress_note
from clusterclip.store import TMP_PREFIX

STATIC_RECIPE = 1
STATIC_MAX_LENGTH = 512
"""Tokens per document the static models keep (their ``max_length``)."""
DISTIL_BATCH_SIZE = 1024
"""Tokens (or corpus words) per MiniLM forward pass while distilling a static model."""


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


def is_static_model_dir(path: Path) -> bool:
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
    """Distil all-MiniLM-L6-v2 into a model2vec static model at ``out_dir`` (offline, atomic; the recipe is
    in the module docstring) and return ``out_dir``.

    ``vocab_limit`` distils only the first M distillable tokens (zero rows for the rest) -- for tests; the
    default is the whole vocabulary (~1 min on 2 cores). ``extra_words`` (a corpus vocabulary, see
    :func:`clusterclip.embed.static_vocab.corpus_vocabulary`) are added after the WordPiece vocabulary and
    written to ``vocabulary.json``. If another process finished the same folder first, its model is kept.
    """
    out = Path(out_dir).expanduser()
    src = minilm_path()
    _check_recipe(dim, pooling, sif_coefficient)
    set_offline()
    import torch

    tok_spec = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = tok_spec["model"]["vocab"]
    keep = _distillable_tokens(tok_spec, dim, vocab_limit)
    words = list(extra_words or [])
    _check_words(words, vocab, pooling)
    started = time.perf_counter()
    model = _load_minilm(src, device, progress)
    hidden = _token_vectors(model, keep, vocab, pooling=pooling, batch_size=DISTIL_BATCH_SIZE, progress=progress)
    if words:
        hidden = np.vstack([hidden, _word_vectors(model, src, words, batch_size=DISTIL_BATCH_SIZE,
                                                  progress=progress)])
    progress_note(f"distil: PCA to {dim} dimensions, SIF weights, writing {out}", progress)
    reduced, explained = _pca_sif(hidden, dim, sif_coefficient)
    embeddings = _vocabulary_rows(vocab, keep, words, reduced)
    provenance = {
        "recipe": STATIC_RECIPE, "source_model": MINILM_ID, "source_sha256": digest(src / "model.safetensors"),
        "dim": dim, "vocab_limit": vocab_limit, "tokens_distilled": len(keep),
        "pooling": "mean over [CLS] token [SEP]" if pooling == "mean" else "token position of [CLS] token [SEP]",
        "sif_coefficient": sif_coefficient, "explained_variance": explained,
        "torch_threads": torch.get_num_threads(), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    files = _model_texts(tok_spec, dim, sif_coefficient)
    if extra_words is not None:
        provenance.update(extra_words=len(words), vocabulary_sha256=vocabulary_hash(words),
                          extra_word_pooling="mean over [CLS] word-pieces [SEP]")
        files["vocabulary.json"] = json.dumps(words, ensure_ascii=False) + "\n"
    files["clusterclip.json"] = json.dumps(provenance, indent=2) + "\n"
    _install_model_dir(out, embeddings, files)
    progress_note(f"distil: done in {time.perf_counter() - started:.0f} s", progress)
    return out


def _check_recipe(dim: int, pooling: str, sif_coefficient: float) -> None:
    """Reject options the recipe cannot distil with."""
    if not 1 <= dim <= MiniLMEmbedder.dim:
        raise ClusterClipError(f"static model dim must be in 1..{MiniLMEmbedder.dim}, got {dim}")
    if pooling not in ("mean", "token"):
        raise ClusterClipError(f"pooling must be 'mean' or 'token', got {pooling!r}")
    if not 0 < sif_coefficient < 1:
        raise ClusterClipError(f"sif_coefficient must be in (0, 1), got {sif_coefficient}")


def _check_words(words: list[str], vocab: dict[str, int], pooling: str) -> None:
    """Reject extra words that cannot join the vocabulary: duplicates, MiniLM tokens, or no mean pooling."""
    if words and pooling != "mean":
        raise ClusterClipError("extra_words need pooling='mean' (a word of several pieces has no single position)")
    clash = [w for w in words if w in vocab]
    if clash or len(set(words)) != len(words):
        raise ClusterClipError(f"extra_words must be distinct and not MiniLM tokens (e.g. {clash[:3]})")


def _vocabulary_rows(vocab: dict[str, int], keep: np.ndarray, words: list[str], reduced: np.ndarray) -> np.ndarray:
    """The model's float32 rows by token id: distilled tokens at their ids, zeros for the others, the extra
    words after the last WordPiece id (added to ``vocab``, in place, at those ids)."""
    n_base = max(vocab.values()) + 1
    embeddings = np.zeros((n_base + len(words), reduced.shape[1]), dtype=np.float32)
    embeddings[keep] = reduced[:len(keep)]
    embeddings[n_base:] = reduced[len(keep):]
    if words:
        vocab.update({w: n_base + i for i, w in enumerate(words)})
    return embeddings


def _model_texts(tok_spec: dict[str, Any], dim: int, sif_coefficient: float) -> dict[str, str]:
    """``tokenizer.json`` (no special tokens added, no padding or truncation) and model2vec's ``config.json``."""
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
        "max_length": STATIC_MAX_LENGTH,
        "embedding_dtype": "float32",
    }
    return {"tokenizer.json": json.dumps(tok_spec, ensure_ascii=False),
            "config.json": json.dumps(m2v_config, indent=2) + "\n"}


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


def _load_minilm(src: Path, device: str, progress: bool) -> Any:
    """MiniLM's transformer (without sentence-transformers' pooling), on ``device``, for inference."""
    progress_note(f"distil: loading {MINILM_ID} on {device}", progress)
    from transformers import AutoModel

    with hf_progress(progress):
        return AutoModel.from_pretrained(str(src)).to(device).eval()


def _token_vectors(model: Any, keep: np.ndarray, vocab: dict[str, int], *, pooling: str, batch_size: int,
                   progress: bool) -> np.ndarray:
    """MiniLM's output for each token ``t`` run as ``[CLS] t [SEP]``, pooled over the three positions."""
    import torch

    cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]
    device = model.device
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


def _word_vectors(model: Any, src: Path, words: Sequence[str], *, batch_size: int, progress: bool) -> np.ndarray:
    """MiniLM's output for each word run as its own text (``[CLS]`` word pieces ``[SEP]``), mean-pooled.

    Words are batched in order of their piece count, so padding is small; padded positions are masked
    out of the mean, and rows come back in the order of ``words``.
    """
    import torch
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    ids = [e.ids for e in tok.encode_batch(list(words), add_special_tokens=True)]
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    order = np.argsort(lengths, kind="stable")
    device = model.device
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
        if out.exists() and not is_static_model_dir(out):
            trash = Path(tempfile.mkdtemp(prefix=TMP_PREFIX + out.name + ".old.", dir=out.parent))
            os.replace(out, trash / out.name)
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.rename(tmp, out)
        except OSError:
            if not is_static_model_dir(out):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
