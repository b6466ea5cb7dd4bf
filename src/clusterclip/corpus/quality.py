"""Built-in quality scorers (``--quality-scorer``): a per-document score in [0, 1], kept as the numeric field
``quality`` (``--strata cluster,quality:5``, ``--within quality``), offline and on the CPU.

``heuristic`` is the mean of ten soft rules in the spirit of Gopher's quality filters (Rae et al. 2021, App. A)
and C4's/DCLM's line rules, each 1 when the document passes and falling towards 0 as it fails:

1. length: at least 50 words;               2. mean word length in [3, 10] characters;
3. at least 80 % of words hold a letter;    4. symbols (``#``, ``...``) under 10 % of words (0 from 30 %);
5. few bullet lines (under 90 %);           6. repeated lines' characters under 10 % (0 from 30 %);
7. repeated word 5-grams' words under 10 % (0 from 30 %); 8. at least two English stop words;
9. word order: the English function-word bigrams (``of the``, ``to be`` ...) at least 2.5 times as frequent as
   the same words in random order would make them (word salad and shuffled text fail, prose passes);
10. no boilerplate phrases (cookie notices, "all rights reserved", "click here" ...), letters with a natural share
    of vowels and few words with five consonants in a row (machine-garbled text fails).

The rules are English-centred: code, tables and other languages score low on 8 and 9 by design of the rules,
not because they are bad data, so use the score to tier English prose (or compare within a language).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable

import numpy as np

QUALITY_FIELD = "quality"
"""The field a scorer writes."""
_WORD = re.compile(r"\S+")
_ALPHA_WORD = re.compile(r"[A-Za-z']+")
_STOP = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
_FUNCTION_BIGRAMS = frozenset({
    ("of", "the"), ("in", "the"), ("to", "the"), ("on", "the"), ("and", "the"), ("is", "a"), ("it", "is"),
    ("to", "be"), ("for", "the"), ("with", "the"), ("from", "the"), ("at", "the"), ("is", "the"), ("of", "a"),
    ("in", "a"), ("by", "the"), ("that", "the"), ("as", "a"), ("can", "be"), ("will", "be")})
_BOILERPLATE = re.compile(r"cookie|privacy policy|all rights reserved|click here|subscribe|terms of (use|service)|"
                          r"javascript|sign up|log ?in to|newsletter|share this|advertisement", re.IGNORECASE)
_VOWELS = frozenset("aeiouAEIOU")
_CONSONANT_RUN = re.compile(r"[b-df-hj-np-tv-xz]{5,}", re.IGNORECASE)


def _soft(ok: float, value: float, bad: float) -> float:
    """1 at ``ok`` or better, 0 at ``bad`` or worse, linear between (either direction)."""
    if ok == bad:
        return float(value >= ok)
    return float(min(1.0, max(0.0, (value - bad) / (ok - bad))))


def _order_rule(lower: list[str]) -> float:
    n = len(lower)
    counts = Counter(lower)
    expected = sum(counts[a] * counts[b] for a, b in _FUNCTION_BIGRAMS) / max(n, 1)
    observed = sum((a, b) in _FUNCTION_BIGRAMS for a, b in itertools.pairwise(lower))
    return _soft(2.5, (observed + 1) / (expected + 1), 1.0)


def _repeats(words: list[str], lines: list[str]) -> tuple[float, float]:
    seen: Counter[str] = Counter(line.strip() for line in lines if line.strip())
    line_chars = sum(len(line) * (c - 1) for line, c in seen.items() if c > 1)
    grams = Counter(tuple(words[i:i + 5]) for i in range(max(len(words) - 4, 0)))
    dup_words = sum(c - 1 for c in grams.values() if c > 1)
    return line_chars / max(sum(len(x) for x in lines), 1), dup_words / max(len(words), 1)


def heuristic_score(text: str) -> float:
    """The ``heuristic`` score of one document (the mean of the module's ten rules)."""
    words = _WORD.findall(text)
    if not words:
        return 0.0
    lines = text.splitlines() or [text]
    alpha = _ALPHA_WORD.findall(text)
    lower = [w.lower() for w in alpha]
    letters = "".join(alpha)
    dup_lines, dup_grams = _repeats(words, lines)
    mean_len = sum(map(len, words)) / len(words)
    bullets = sum(line.lstrip().startswith(("-", "*", "•")) for line in lines) / len(lines)
    vowels = sum(ch in _VOWELS for ch in letters) / max(len(letters), 1)
    symbols = (text.count("#") + text.count("...")) / len(words)
    vowel_rule = _soft(0.3, vowels, 0.15) if vowels < 0.3 else _soft(0.5, 1 - vowels, 0.35)
    rules = [
        _soft(50, len(words), 0),
        1.0 if 3 <= mean_len <= 10 else 0.0,
        _soft(0.8, len(alpha) / len(words), 0.4),
        _soft(-0.1, -symbols, -0.3),
        _soft(0.9, 1.0 - bullets, 0.0),
        _soft(-0.1, -dup_lines, -0.3),
        _soft(-0.1, -dup_grams, -0.3),
        _soft(2, len(_STOP.intersection(lower)), 0),
        _order_rule(lower),
        min(_soft(0, -len(_BOILERPLATE.findall(text)), -3), vowel_rule,
            _soft(-0.03, -sum(bool(_CONSONANT_RUN.search(w)) for w in alpha) / max(len(alpha), 1), -0.15)),
    ]
    return float(np.mean(rules))


def heuristic_scores(texts: list[str]) -> np.ndarray:
    """:func:`heuristic_score` of each text (float64)."""
    return np.fromiter((heuristic_score(t) for t in texts), dtype=np.float64, count=len(texts))


SCORERS: dict[str, Callable[[list[str]], np.ndarray]] = {"heuristic": heuristic_scores}
"""Every built-in quality scorer by name (``--quality-scorer``)."""
