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

The stage (:mod:`clusterclip.embed.stage`) streams the corpus parts, embeds in fixed chunks and writes
``embeddings/shard-*.npy`` (float16) one shard at a time; ``embeddings/progress.json`` lists finished
shards so a killed run resumes at the first missing shard and ends byte-identical to an uninterrupted one.
See ``docs/embedders.md``. One module per embedder; this package re-exports the public names.
"""

from clusterclip.embed.base import MINILM_ID, Embedder, EmbedderBase, minilm_path
from clusterclip.embed.config import EmbedConfig, embed_command
from clusterclip.embed.distill import distill_static_model, static_cache_dir, vocabulary_hash
from clusterclip.embed.hashing import HashingEmbedder
from clusterclip.embed.load import gather_embeddings, iter_embeddings, load_embeddings, run_embedder
from clusterclip.embed.lsa import LsaEmbedder
from clusterclip.embed.minilm import MiniLMEmbedder
from clusterclip.embed.registry import (
    DEFAULT_BATCH_SIZES,
    DEFAULT_EMBEDDER,
    EMBEDDERS,
    FITTED_EMBEDDERS,
    encode_texts,
    get_embedder,
)
from clusterclip.embed.stage import embed_stage, encode_shards
from clusterclip.embed.static import StaticEmbedder
from clusterclip.embed.static_vocab import StaticVocabEmbedder, corpus_vocabulary

__all__ = [
    "DEFAULT_BATCH_SIZES",
    "DEFAULT_EMBEDDER",
    "EMBEDDERS",
    "FITTED_EMBEDDERS",
    "MINILM_ID",
    "EmbedConfig",
    "Embedder",
    "EmbedderBase",
    "HashingEmbedder",
    "LsaEmbedder",
    "MiniLMEmbedder",
    "StaticEmbedder",
    "StaticVocabEmbedder",
    "corpus_vocabulary",
    "distill_static_model",
    "embed_command",
    "embed_stage",
    "encode_shards",
    "encode_texts",
    "gather_embeddings",
    "get_embedder",
    "iter_embeddings",
    "load_embeddings",
    "minilm_path",
    "run_embedder",
    "static_cache_dir",
    "vocabulary_hash",
]
