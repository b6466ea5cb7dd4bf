"""The command lines that rebuild an experiment or a search, as their stage records hold them: every setting
that differs from its declared default, as a flag (so no preset is assumed)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from clusterclip.experiment.config import DATA_FIELDS, MEASURING_FIELDS, SAMPLING_FIELDS, ExperimentConfig
from clusterclip.settings import command_flags


def settings_flags(obj: Any, names: Sequence[str] | None = None) -> list[str]:
    """``[--flag, value, ...]`` of the settings of ``obj`` (a Settings dataclass) that differ from their
    declared defaults; None is written as the command line writes it (``cli_none``: ``--docs 0``)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        spelled = f.metadata.get("cli_none")
        if value is None and spelled and f.default is not None:
            value = spelled.split(" for ")[0]
        values[f.name] = value
    return command_flags(type(obj), values, names)


def config_flags(cfg: ExperimentConfig, names: Sequence[str]) -> list[str]:
    """The flags of ``cfg``'s settings in ``names``, then of its model and training recipe."""
    return [*settings_flags(cfg, names), *settings_flags(cfg.model), *settings_flags(cfg.train)]


def experiment_argv(inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str],
                    cfg: ExperimentConfig) -> list[str]:
    """The ``clusterclip experiment`` command line that runs ``cfg`` into ``out``."""
    return ["clusterclip", "experiment", *map(str, inputs), "--out", str(out),
            *config_flags(cfg, (*DATA_FIELDS, *SAMPLING_FIELDS, *MEASURING_FIELDS))]
