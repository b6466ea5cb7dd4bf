"""Document embedders and the ``embed`` stage.

Six embedders share one small interface (:class:`Embedder`): float32 ``[n, dim]`` rows with unit L2
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
* ``subword`` -- opt-in: ``lsa`` plus hashed character n-grams of every word in the same SVD, so a document
  whose words are all outside the fitted vocabulary (another script, code, symbol art) still gets a vector of
  its own; same clusters as ``lsa`` on the benchmark corpora, a slower fit (``embeddings/subword``).

The stage (:mod:`clusterclip.embed.stage`) streams the corpus parts, embeds in fixed chunks and writes
``embeddings/shard-*.npy`` (float16) one shard at a time; ``embeddings/progress.json`` lists finished
shards so a killed run resumes at the first missing shard and ends byte-identical to an uninterrupted one.
See ``docs/embedders.md``. One module per embedder; this package re-exports the public names.
"""
