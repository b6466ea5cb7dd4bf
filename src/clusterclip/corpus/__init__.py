"""Corpus readers and the corpus stage.

Readers turn JSONL (plain, ``.gz``, ``.zst``), Parquet, folders of ``.txt`` files and Hugging Face
datasets saved with ``save_to_disk`` into batches of documents ``(id, text, group)``. The corpus stage
gives every document a stable index (its position in input order), counts its tokens and writes
``corpus/part-*.parquet`` plus ``tokens.npy`` into the run directory, so later stages never re-parse
user files. Bad records raise :class:`~clusterclip.errors.BadRecordError` naming file, line and problem,
or are skipped and counted with ``on_bad_record="skip"``.

With no inputs the embedded default corpus is used: the docstrings of the Python standard library
installed with the interpreter (real English text, available offline everywhere).

Modules: a format is a class that only reads, in its own module (:mod:`.jsonl` with :mod:`.compressed`,
:mod:`.parquet`, :mod:`.txt`, :mod:`.hf`) over :mod:`.format_base`, and one line of the registry
:mod:`.formats`; :mod:`.default_corpus` is the corpus of no inputs. Field extraction, the bad-record policy and
batching are written once in :mod:`.records`. :mod:`.inputs` resolves inputs into formats and work units,
:mod:`.reading` reads a unit, :mod:`.parts` writes and reads corpus parts, :mod:`.stage` is the stage
(:mod:`.ray_read` its Ray engine, :mod:`.duplicate_ids` its id check). Sizes of batches, parts and units are
in :mod:`.limits`.
"""
