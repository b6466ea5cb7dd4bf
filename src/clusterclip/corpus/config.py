"""Options of the corpus stage: the reader options plus token counting and the default corpus' threshold."""

from __future__ import annotations

from dataclasses import dataclass

from clusterclip.corpus.records import ReadOptions
from clusterclip.settings import at_least, is_text, optional, setting


@dataclass(frozen=True)
class CorpusConfig(ReadOptions):
    """Options of the corpus stage (part of the stage record): how to read records, how to count
    tokens, and how long a docstring must be to join the default corpus."""

    API_ARGUMENT = "corpus"

    tokenizer: str | None = setting(None, check=optional(is_text),
                                    help="Hugging Face tokenizer name or path for token counts (default: a "
                                         "word/punctuation regex count)")
    min_words: int = setting(25, check=at_least(1), help="words a docstring needs to join the default corpus")


CORPUS_FIELDS = ("text_field", "id_field", "group_field", "split", "on_bad_record", "tokenizer")
"""The settings of :class:`CorpusConfig` that are options of ``clusterclip embed`` and ``run``."""
