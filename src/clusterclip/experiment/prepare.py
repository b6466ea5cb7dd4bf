"""Step 1 of the experiment: the data every run shares.

:func:`prepare_data` draws the document subset, holds out a split stratified by (cluster, domain) and
runs the pipeline (corpus, embed, cluster) on the training split; :func:`tokenize` trains the BPE on the
training split and encodes both splits.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.cluster.config import ClusterConfig
from clusterclip.cluster.kmeans import assign, fit_centroids
from clusterclip.cluster.stage import cluster_stage
from clusterclip.contract.cluster import CENTROIDS, load_labels
from clusterclip.contract.corpus import CorpusRecord, read_column
from clusterclip.contract.record_kinds import text_of
from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.quality import QUALITY_FIELD
from clusterclip.corpus.stage import corpus_stage
from clusterclip.dedup.config import DedupConfig
from clusterclip.dedup.semantic import has_near_copy
from clusterclip.dedup.stage import dedup_stage
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.registry import encode_texts
from clusterclip.embed.stage import embed_stage
from clusterclip.errors import ClusterClipError
from clusterclip.experiment.config import ExperimentConfig
from clusterclip.experiment.data import (
    TokenizedDocs,
    choose_subset,
    cut_words,
    encode_docs,
    load_tokenizer,
    stratified_split,
    train_tokenizer,
)
from clusterclip.experiment.sft import Turn, cut_turns, encode_turns, messages, record_turns
from clusterclip.settings import SettingsError
from clusterclip.stages import writing
from clusterclip.store import RunDir, atomic_write, config_hash, load_npy

NO_DOMAIN = "(none)"


@dataclass(frozen=True)
class Subset:
    """The documents drawn from the input, cut to ``max_words``; ``domains`` uses ``(none)`` for missing."""

    input_documents: int
    ids: list[str]
    texts: list[str]
    domains: list[str]
    has_domains: bool
    turns: list[list[Turn]] | None = None
    """``--objective sft``: each conversation's turns (cut), whose text is ``texts``."""

    def jsonl(self, rows: np.ndarray) -> str:
        """The given rows as the JSON lines of a split file (id, text or the conversation's messages, domain)."""
        def body(i: int) -> dict[str, Any]:
            return {"text": self.texts[i]} if self.turns is None else {"messages": messages(self.turns[i])}

        return "".join(json.dumps({"id": self.ids[i], **body(i), "domain": self.domains[i]},
                                  ensure_ascii=False) + "\n" for i in rows)

    def turns_of(self, rows: np.ndarray) -> list[list[Turn]] | None:
        """The conversations of ``rows`` (None: not ``--objective sft``)."""
        return None if self.turns is None else [self.turns[i] for i in rows]


@dataclass(frozen=True)
class Prepared:
    """Both splits with their clusters (the training split's k-means) and domains (None without a group field);
    ``heldout_near_train`` marks the held-out documents with a near-duplicate in the training split."""

    run: RunDir
    split_hash: str
    train_texts: list[str]
    heldout_texts: list[str]
    train_domains: np.ndarray | None
    heldout_domains: np.ndarray | None
    labels: np.ndarray
    heldout_labels: np.ndarray
    heldout_near_train: np.ndarray
    data: dict[str, Any]
    source: Path
    """The run directory of the input's corpus stage (its kept fields are what a stratified plan reads)."""
    train_turns: list[list[Turn]] | None = None
    heldout_turns: list[list[Turn]] | None = None


def prepare_data(inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], cfg: ExperimentConfig,
                 progress: bool = False, expect_split: str | None = None, force: bool = False,
                 source_dir: Path | None = None) -> Prepared:
    """Draw and cut the subset, split it stratified by (cluster, domain), run the pipeline on the training
    split and assign the held-out documents to its centroids.

    The stratifying clusters come from a k-means of the whole subset with the same embedder and K; the
    clusters used for training and metrics are the training split's own, as in real use. When
    ``expect_split`` (the split hash of finished runs) differs from the new split, nothing is written
    and an error explains why, unless ``force``. ``source_dir`` holds the corpus stage on the whole
    input (default ``OUT/experiment/source``); several splits share one.
    """
    run = RunDir(out)
    exp = run.root / "experiment"
    source_dir = source_dir or exp / "source"
    subset = _read_subset(inputs, source_dir, cfg, progress)
    emb = encode_texts(cfg.embedder, subset.texts, progress=progress)
    held = _heldout_mask(emb, subset.domains, cfg)
    tr, ho = np.flatnonzero(~held), np.flatnonzero(held)
    train_jsonl, heldout_jsonl = subset.jsonl(tr), subset.jsonl(ho)
    split_hash = config_hash({"train": train_jsonl, "heldout": heldout_jsonl})
    if expect_split is not None and expect_split != split_hash and not force:
        raise SettingsError("", f"{exp / 'results.json'}: the held-out split drawn now differs from the one its "
                            "finished runs used (the corpus, the embedder or the clustering code changed); pass "
                            "{force} to set those runs aside and start again, or use another {out}", ExperimentConfig)
    data_dir = exp / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    _write_if_changed(data_dir / "train.jsonl", train_jsonl)
    _write_if_changed(data_dir / "heldout.jsonl", heldout_jsonl)
    centroids = _train_pipeline(run, data_dir / "train.jsonl", cfg, progress)
    labels = load_labels(run).astype(np.int64)
    heldout_labels = assign([emb[ho]], centroids)[0].astype(np.int64)
    train_dom = np.array(read_column(run, "group"), dtype=object).astype(str)
    heldout_dom = np.array(subset.domains, dtype=object)[ho].astype(str)
    near = has_near_copy(emb[ho], emb[tr], DedupConfig().eps)
    data = {**_data_summary(subset, int(tr.size), labels, heldout_labels, int(centroids.shape[0])),
            "heldout_near_train": int(near.sum())}
    if subset.has_domains:
        data["domains"] = _domain_sizes(train_dom, heldout_dom)
    train_texts = read_column(run, "text")
    if len(train_texts) != tr.size:
        raise ClusterClipError(f"{run.root}: the training split holds {len(train_texts)} documents, expected "
                               f"{tr.size}; remove {data_dir} and run the experiment again")
    return Prepared(run, split_hash, train_texts, [subset.texts[i] for i in ho],
                    train_dom if subset.has_domains else None, heldout_dom if subset.has_domains else None,
                    labels, heldout_labels, near, data, source_dir, subset.turns_of(tr), subset.turns_of(ho))


@dataclass(frozen=True)
class Tokenized:
    """Both splits encoded by the experiment's BPE, and the vocabulary size it ended with."""

    train: TokenizedDocs
    heldout: TokenizedDocs
    vocab_size: int


def tokenize(prep: Prepared, cfg: ExperimentConfig, path: Path, reuse: bool) -> Tokenized:
    """Train the byte-level BPE on the training split (or load it, ``reuse``, so that the token ids of
    finished runs stay valid) and encode both splits."""
    tokenizer = load_tokenizer(path) if reuse else train_tokenizer(prep.train_texts, cfg.model.vocab_size, path)
    vocab = int(tokenizer.get_vocab_size())  # type: ignore[attr-defined]
    if prep.train_turns is not None and prep.heldout_turns is not None:
        return Tokenized(encode_turns(tokenizer, prep.train_turns), encode_turns(tokenizer, prep.heldout_turns), vocab)
    return Tokenized(encode_docs(tokenizer, prep.train_texts), encode_docs(tokenizer, prep.heldout_texts), vocab)


def _read_subset(inputs: Sequence[str | os.PathLike[str]], source_dir: Path, cfg: ExperimentConfig,
                 progress: bool) -> Subset:
    """Corpus stage on the whole input, then the seeded subset of ``docs`` documents, cut to ``max_words``."""
    source = RunDir(source_dir)
    pipeline_stages(source, inputs, source_config(cfg), progress)
    texts = read_column(source, "text")
    ids = read_column(source, "id")
    groups = read_column(source, "group")
    pick = choose_subset(len(texts), cfg.docs, cfg.split_seed)
    if pick.size < 4 * cfg.k:
        raise SettingsError("docs", f"gives {pick.size} documents, too few for {{k}} {cfg.k} and a held-out split "
                            f"(at least {4 * cfg.k}); use more {{docs}} or a smaller {{k}}", ExperimentConfig)
    picked = [groups[i] for i in pick]
    domains = [g if g is not None else NO_DOMAIN for g in picked]
    if cfg.objective == "sft":
        records = read_column(source, "record")
        turns = [cut_turns(t, cfg.max_words) for t in record_turns(
            [texts[i] for i in pick], [records[i] for i in pick], CorpusRecord.require(source).config.text_options())]
        return Subset(len(texts), [str(ids[i]) for i in pick], [text_of(t) for t in turns], domains,
                      any(g is not None for g in picked), turns)
    return Subset(len(texts), [str(ids[i]) for i in pick], [cut_words(texts[i], cfg.max_words) for i in pick],
                  domains, any(g is not None for g in picked))


def source_config(cfg: ExperimentConfig) -> CorpusConfig:
    """The corpus stage of the input: its text and group fields, and the fields the strategies' plans read (kept
    from the input, or ``quality`` scored by ``quality_scorer``); also ``tune``'s whole corpus."""
    fields = cfg.input_fields()
    scorer = cfg.quality_scorer if QUALITY_FIELD in fields else None
    keep = tuple(n for n in fields if scorer is None or n != QUALITY_FIELD)
    return CorpusConfig(text_field=cfg.text_field, group_field=cfg.group_field, keep_fields=keep,
                        quality_scorer=scorer)


def _heldout_mask(emb: np.ndarray, domains: list[str], cfg: ExperimentConfig) -> np.ndarray:
    """``heldout`` of every (cluster, domain) cell, the clusters a k-means of the whole subset."""
    fit = fit_centroids(emb, cfg.k, seed=cfg.split_seed)
    split_labels, _ = assign([emb], fit.centroids)
    strata = np.array([f"{c}|{d}" for c, d in zip(split_labels.tolist(), domains, strict=True)])
    return stratified_split(strata, cfg.heldout, cfg.split_seed)


def _train_pipeline(run: RunDir, train_file: Path, cfg: ExperimentConfig, progress: bool) -> np.ndarray:
    """Corpus, embed and cluster stages on the training split (``OUT`` is its run directory), and its dedup
    stage when a strategy plans over duplicate groups; its centroids."""
    pipeline_stages(run, [train_file], CorpusConfig(id_field="id", group_field="domain"), progress, cfg.embedder,
                    ClusterConfig(k=cfg.k, seed=cfg.split_seed))
    if cfg.uses_groups():
        with writing(run):
            dedup_stage(run)
    return load_npy(run.path(CENTROIDS))


def pipeline_stages(run: RunDir, inputs: Sequence[str | os.PathLike[str]], corpus: CorpusConfig, progress: bool,
                    embedder: str | None = None, cluster: ClusterConfig | None = None) -> None:
    """The corpus stage into ``run``, then the embed stage (with ``embedder``) and the cluster stage (with
    ``cluster``) when given; under the run's lock, after removing the temp files a killed run left."""
    with writing(run):
        corpus_stage(run, inputs, corpus, progress=progress)
        if embedder is not None:
            embed_stage(run, EmbedConfig(embedder=embedder), progress=progress)
        if cluster is not None:
            cluster_stage(run, cluster, progress=progress)


def _data_summary(subset: Subset, train_documents: int, labels: np.ndarray, heldout_labels: np.ndarray,
                  k: int) -> dict[str, Any]:
    return {
        "input_documents": subset.input_documents, "subset_documents": len(subset.texts),
        "train_documents": train_documents, "heldout_documents": len(subset.texts) - train_documents, "k": k,
        "train_cluster_sizes": np.bincount(labels, minlength=k).tolist(),
        "heldout_cluster_sizes": np.bincount(heldout_labels, minlength=k).tolist(),
    }


def _domain_sizes(train_domains: np.ndarray, heldout_domains: np.ndarray) -> dict[str, dict[str, int]]:
    """Training and held-out documents per domain, largest first."""
    keys, counts = np.unique(train_domains, return_counts=True)
    hkeys, hcounts = np.unique(heldout_domains, return_counts=True)
    held = dict(zip(hkeys.tolist(), hcounts.tolist(), strict=True))
    return {k: {"train_documents": int(c), "heldout_documents": int(held.get(k, 0))}
            for k, c in sorted(zip(keys.tolist(), counts.tolist(), strict=True), key=lambda t: -t[1])}


def input_fingerprint(inputs: Sequence[str | os.PathLike[str]]) -> list[Any]:
    """Each input's path, size and modification time: what the finished runs of an experiment or a search
    were trained on (a changed corpus invalidates them)."""
    out: list[Any] = []
    for p in inputs:
        path = Path(p)
        st = path.stat() if path.exists() else None
        out.append([str(path.resolve()), st.st_size if st else None, st.st_mtime_ns if st else None])
    return out


def _write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` atomically unless the file already holds it (keeps mtimes, so stages stay fresh)."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    with atomic_write(path, "w") as fh:
        fh.write(text)
