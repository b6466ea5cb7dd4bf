"""Options of the corpus stage: the reader options plus token counting and the default corpus' threshold."""

from __future__ import annotations

from dataclasses import dataclass

from clusterclip.corpus.quality import QUALITY_FIELD, SCORERS
from clusterclip.corpus.records import ReadOptions, field_spec
from clusterclip.settings import at_least, is_text, one_of, optional, setting


@dataclass(frozen=True)
class CorpusConfig(ReadOptions):
    """Options of the corpus stage (part of the stage record): how to read records, how to count
    tokens, and how long a docstring must be to join the default corpus."""

    API_ARGUMENT = "corpus"

    tokenizer: str | None = setting(None, check=optional(is_text),
                                    help="Hugging Face tokenizer name or path for token counts; conversations "
                                         "are counted through its chat template when it has one, else as their "
                                         "text (default: a word/punctuation regex count)")
    min_words: int = setting(25, check=at_least(1), help="words a docstring needs to join the default corpus")
    quality_scorer: str | None = setting(
        None, check=optional(one_of(SCORERS)),
        help=f"score every document with a built-in scorer ({', '.join(SCORERS)}: English prose rules, "
             f"docs/sampling.md#quality) into the numeric field {QUALITY_FIELD!r} (default: none)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.quality_scorer is not None and QUALITY_FIELD in self.field_names:
            raise self.error_class("quality_scorer", f"writes the field {QUALITY_FIELD!r}, which --keep-fields keeps "
                                   "from the input too: keep one of them", type(self))

    def stored_fields(self) -> tuple[str, ...]:
        """Every field the corpus stage stores: the kept ones, then the scorer's (as ``FIELD:kind`` specs)."""
        scored = (f"{QUALITY_FIELD}:num",) if self.quality_scorer else ()
        return (*self.keep_fields, *scored)

    def stored_names(self) -> tuple[str, ...]:
        return tuple(field_spec(f)[0] for f in self.stored_fields())


CORPUS_FIELDS = ("text_field", "record_kind", "text_template", "id_field", "group_field", "keep_fields", "split",
                 "on_bad_record", "tokenizer", "quality_scorer")
"""The settings of :class:`CorpusConfig` that are options of ``clusterclip embed`` and ``run``."""
