"""Held-out splits ready to train on: :func:`prepare_split` draws a split, runs the pipeline on its training
documents, tokenizes both sides and fixes what its proxy runs share (:class:`~clusterclip.experiment.steps.SplitData`).

Finished results of an earlier session are checked against the data just prepared: runs trained on
another split are set aside (``force``) or refused, and their tokenizer is reused so token ids stay valid.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clusterclip.contract.corpus import CORPUS_STAGE
from clusterclip.contract.experiment import EXPERIMENT_DIR, EXPERIMENT_RESULTS
from clusterclip.contract.experiment_results import ExperimentResults
from clusterclip.experiment.config import ExperimentConfig
from clusterclip.experiment.prepare import prepare_data, tokenize
from clusterclip.experiment.results import discard
from clusterclip.experiment.steps import SplitData, set_up
from clusterclip.store import config_hash

EXPERIMENT_DIR = EXPERIMENT_DIR


def split_root(out: str | os.PathLike[str], split: int, primary: int) -> Path:
    """Run directory of a split's training documents: ``OUT`` for the first split, else a folder under it."""
    return Path(out) if split == primary else Path(out) / EXPERIMENT_DIR / "splits" / str(split)


def prepare_split(inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], cfg: ExperimentConfig,
                  split: int, progress: bool = False, previous: ExperimentResults | None = None,
                  force: bool = False, root: Path | None = None) -> tuple[SplitData, ExperimentResults | None]:
    """Prepare, tokenize and set up one split (the corpus stage of the input, ``OUT/experiment/source``,
    is shared by all splits); ``root`` overrides the split's run directory (:func:`split_root`).

    ``previous`` (finished results) is returned unchanged when its runs of this split were trained on the
    same data, else set aside (``force``) or refused; its tokenizer is reused so token ids stay valid.
    """
    primary = cfg.splits()[0]
    scfg = dataclasses.replace(cfg, split_seed=split, split_seeds=())
    root = root or split_root(out, split, primary)
    info = _previous_split(previous, split, primary)
    prep = prepare_data(inputs, root, scfg, progress, info.get("split_hash"), force,
                        source_dir=Path(out) / EXPERIMENT_DIR / "source")
    data_hash = config_hash({"cfg": scfg.results_hash(), "train": prep.run.output_hash(CORPUS_STAGE)})
    tok_path = root / EXPERIMENT_DIR / "tokenizer.json"
    if info:
        previous = _same_data(previous, info, Path(out) / EXPERIMENT_RESULTS, tok_path, prep.split_hash,
                              data_hash, force)
    tok = tokenize(prep, scfg, tok_path, reuse=bool(info) and previous is not None)
    return SplitData(split, scfg, prep, tok, set_up(prep, tok, scfg), data_hash), previous


def _previous_split(previous: ExperimentResults | None, split: int, primary: int) -> dict[str, Any]:
    """What finished results recorded about a split's data ({} when they hold no run of it)."""
    return {} if previous is None else previous.split_data(split, primary)


def _same_data(previous: ExperimentResults | None, info: dict[str, Any], path: Path, tokenizer: Path,
               split_hash: str, data_hash: str, force: bool) -> ExperimentResults | None:
    """``previous`` if its runs were trained on the data just prepared, with the tokenizer still there."""
    if previous is None:
        return None
    if (info.get("split_hash", split_hash) != split_hash or info.get("data_hash") != data_hash
            or not tokenizer.exists()):
        return discard(path, previous, force, "were trained on other data (the corpus, the split or an upstream "
                       "stage changed)")
    return previous
