"""Every file name of the run directory, in one place (the contract is ``docs/run-directory.md``).

Names only: this module is data, and the storage layer uses it without knowing what a stage does.

Stages, the report, the sampler and the exporters refer to artifacts only through these names, so the
layout is written down once. Paths are relative to the run directory unless a function says otherwise.
"""

from __future__ import annotations

# stage names (a stage's record is ``record(name)``)
CORPUS_STAGE = "corpus"
EMBED_STAGE = "embed"
CLUSTER_STAGE = "cluster"
STAGES = (CORPUS_STAGE, EMBED_STAGE, CLUSTER_STAGE)
"""The stages with one record per run directory, upstream first (plans have one record each)."""


# corpus stage
CORPUS_DIR = "corpus"
CORPUS_PART_GLOB = "part-*.parquet"
CORPUS_STAGING = "corpus/.staging"
CORPUS_ID_SPILL = "corpus/.ids"
"""Scratch of the duplicate-id check while the corpus stage runs (:mod:`clusterclip.corpus.id_spill`)."""
TOKENS = "tokens.npy"


def corpus_part(i: int) -> str:
    """The ``i``-th corpus part (50,000 documents each, in document order; each ``add`` starts new parts)."""
    return f"{CORPUS_DIR}/part-{i:05d}.parquet"


def corpus_staging_part(unit: int, i: int) -> str:
    """The ``i``-th part read from work unit ``unit`` by the Ray engine, before the final parts are cut."""
    return f"{CORPUS_STAGING}/unit-{unit:06d}-{i:05d}.parquet"


# embed stage
EMBED_DIR = "embeddings"
EMBED_PROGRESS = "embeddings/progress.json"
"""Finished shards of an interrupted embed stage, with checksums, so a re-run reuses them."""
EMBED_SHARD_GLOB = "shard-*.npy"


LSA_DIR = "embeddings/lsa"
"""The ``lsa`` embedder's model fitted by the embed stage (listed with checksums in its record)."""
LSA_FILES = ("lsa.json", "vocabulary.json", "idf.npy", "components.npy")
"""Files of ``LSA_DIR``: options, vocabulary (column order), IDF per column, SVD components ``[dim, vocab]``."""
STATIC_VOCAB_DIR = "embeddings/static-vocab"
"""The ``static-vocab`` embedder's model (distilled with the corpus' words; listed with checksums in its record)."""
STATIC_VOCAB_FILES = ("static-vocab.json", "vocabulary.json", "tokenizer.json", "model.safetensors", "config.json",
                      "clusterclip.json")
"""Files of ``STATIC_VOCAB_DIR``: options, the corpus words, then the model2vec folder (tokenizer with the words
added, token vectors, model2vec config, distillation provenance)."""


def embed_shard(i: int) -> str:
    """The ``i``-th embedding shard (float16, rows in document order)."""
    return f"{EMBED_DIR}/shard-{i:05d}.npy"


# cluster stage
CENTROIDS = "centroids.npy"
LABELS = "labels.npy"
SCORES = "scores.npy"
SIZES = "sizes.npy"

# clusterclip add: documents appended to a finished run
ADD_JOURNAL = "add-journal.json"
"""Written before ``clusterclip add`` changes anything: the records it started from and its inputs, so a
killed add is finished by re-running it; removed once the grown records are written."""
DRIFT_REPORT = "drift.json"
"""The drift report of the latest ``clusterclip add`` (share of new documents far from every centroid)."""

# plan stage: one folder per plan under plans/
PLANS_DIR = "plans"


def plan_path(name: str, fname: str | None = None) -> str:
    """The folder of plan ``name``, or its file ``fname`` (one of the ``PLAN_*`` names)."""
    folder = f"{PLANS_DIR}/{name}"
    return f"{folder}/{fname}" if fname else folder


PLAN_ORDER = "plan.npy"
PLAN_RECORD = "plan.json"
PLAN_BLOCKS = "blocks.npy"
"""uint32 CRC-32 of each block of 2^20 entries of ``plan.npy``, verified by every reader (``plan.integrity``)."""
PLAN_DRAWS = "cluster_draws.npy"
PLAN_UNIQUE = "cluster_unique.npy"
PLAN_MAX_REPEAT = "cluster_max_repeat.npy"
PLAN_EXHAUSTED_AT = "cluster_exhausted_at.npy"
PLAN_TOKENS = "cluster_tokens.npy"
PLAN_MIXTURE = "mixture.npy"
PLAN_REPEAT_HIST = "repeat_hist.npy"


def plan_stage_name(name: str) -> str:
    """The stage name of plan ``name``: its record is ``plans/<name>/plan.json``."""
    return plan_path(name, PLAN_RECORD.removesuffix(".json"))


# records and whole-run outputs
SUMMARY = "summary.json"
COMMANDS = "commands.json"
"""The command line that last built each stage (``{stage: argv}``), kept beside the records so that a message
about a damaged record can still name the command that rebuilds it; read for messages only."""
REPORT_DIR = "report"
REPORT_HTML = "report.html"
REPORT_STAGE = "report"
"""Stage name of the report: ``report.json`` records what it was built from, so a rebuilt stage makes it stale."""
EXPERIMENT_DIR = "experiment"
"""``clusterclip experiment``'s work: a run directory of its own whose one stage is :data:`EXPERIMENT_STAGE`."""
EXPERIMENT_STAGE = "experiment"
EXPERIMENT_RESULTS = "experiment/results.json"
TUNE_DIR = "tune"
"""``clusterclip tune``'s work: ``splits/<seed>/`` run directories, ``runs/<hash>.json`` proxy runs."""
TUNE_RESULTS = "tune/results.json"
TUNE_RUNS = "tune/runs"
TUNE_SEARCH_STAGE = "search"
"""The stage of the tune directory whose record (``tune/search.json``) lists ``results.json``."""
LOCK = ".lock"
EXPORT_MANIFEST = "export.json"
"""Written last by ``clusterclip export`` into its output folder (not the run directory): identity and files."""
EXPORT_STAGING = ".partial"
"""Where ``clusterclip export`` writes before moving the files into its output folder (a killed export's)."""
EXPORT_IDENTITY = "identity.json"
"""In ``EXPORT_STAGING``: the identity (plan, hash, format, tokenizer) of the export being written."""


def export_shard(i: int, fmt: str) -> str:
    """The ``i``-th shard of ``clusterclip export`` in format ``fmt`` (``jsonl`` or ``parquet``)."""
    return f"part-{i:05d}.{fmt}"


def record(stage: str) -> str:
    """The record that marks ``stage`` finished (``plans/<name>/plan`` -> ``plans/<name>/plan.json``)."""
    return f"{stage}.json"


RUN = "{run}"
"""Stands for the run directory in the ``command`` a stage record holds (so a moved run still renders)."""


def command(stage: str) -> tuple[str, ...]:
    """The generic command that builds ``stage`` when its record (and so its exact command) is unknown;
    options it cannot know are shown as placeholders."""
    if stage in (CORPUS_STAGE, EMBED_STAGE):
        return ("clusterclip", "embed", "INPUT...", "--out", RUN)
    if stage.startswith(PLANS_DIR + "/"):
        return ("clusterclip", "plan", RUN, "--strategy", "STRATEGY", "OPTIONS...")
    return ("clusterclip", stage.split("/")[0], RUN)
