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
