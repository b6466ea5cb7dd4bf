"""Corpus readers and the corpus stage.

Readers turn JSONL (plain, ``.gz``, ``.zst``), Parquet, folders of ``.txt`` files and Hugging Face
datasets saved with ``save_to_disk`` into batches of documents ``(id, text, group)``. The corpus stage
gives every document a stable index (its position in input order), counts its tokens and writes
``corpus/part-*.parquet`` plus ``tokens.npy`` into the run directory, so later stages never re-parse
user files. Bad records raise :class:`~clusterclip.errors.BadRecordError` naming file, line and problem,
or are skipped and counted with ``on_bad_record="skip"``.

With no inputs the embedded default corpus is used: the docstrings of the Python standard library
installed with the interpreter (real English text, available offline everywhere).

Modules: a format only reads a file (:mod:`.jsonl` with :mod:`.compressed`, :mod:`.parquet`, :mod:`.txt`,
:mod:`.hf`, :mod:`.default_corpus`); field extraction, the bad-record policy and batching are written once
in :mod:`.records`. :mod:`.inputs` resolves inputs into formats and work units, :mod:`.reading` reads a
unit, :mod:`.parts` writes and reads corpus parts, :mod:`.stage` is the stage (:mod:`.ray_read` its Ray
engine, :mod:`.duplicate_ids` its id check). Sizes of batches, parts and units are in :mod:`.limits`.
"""

from clusterclip.corpus.config import CORPUS_FIELDS, CorpusConfig
from clusterclip.corpus.default_corpus import DEFAULT_CORPUS, stdlib_documents
from clusterclip.corpus.hf import hf_batches
from clusterclip.corpus.inputs import WorkUnit, expand_inputs, files_under, inputs_fingerprint, number_lines, work_units
from clusterclip.corpus.jsonl import count_newlines, json_document, jsonl_records
from clusterclip.corpus.limits import PART_ROWS
from clusterclip.corpus.parquet import open_parquet, parquet_batches
from clusterclip.corpus.parts import PartWriter, corpus_parts, read_column
from clusterclip.corpus.reading import iter_documents, located_documents, read_unit
from clusterclip.corpus.records import Document, ReadOptions, ReadStats
from clusterclip.corpus.stage import check_inputs_unchanged, corpus_command, corpus_stage
from clusterclip.corpus.tokens import make_token_counter
from clusterclip.corpus.txt import txt_document, txt_records

__all__ = [
    "CORPUS_FIELDS", "DEFAULT_CORPUS", "PART_ROWS", "CorpusConfig", "Document",
    "PartWriter", "ReadOptions", "ReadStats", "WorkUnit", "check_inputs_unchanged",
    "corpus_command", "corpus_parts", "corpus_stage", "count_newlines", "expand_inputs",
    "files_under", "hf_batches", "inputs_fingerprint", "iter_documents", "json_document",
    "jsonl_records", "located_documents", "make_token_counter", "number_lines", "open_parquet",
    "parquet_batches", "read_column", "read_unit",
    "stdlib_documents", "txt_document", "txt_records", "work_units",
]
