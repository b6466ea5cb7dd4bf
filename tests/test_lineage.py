"""A run's lineage: every input that entered it (by content), every add, refit and continuation, so a run
changes without losing or doubling a document (docs/run-directory.md, "Lineage")."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from clusterclip.add.lineage import abort_add
from clusterclip.cli.main import main
from clusterclip.contract.cluster import CLUSTER_STAGE, LABELS
from clusterclip.contract.corpus import CORPUS_DIR, CORPUS_STAGE, TOKENS, read_column
from clusterclip.contract.plan import PLAN_ORDER, PLAN_RECORD, PLANS_DIR, plan_path, plan_stage_name
from clusterclip.contract.report import ReportRecord
from clusterclip.contract.stages import audit
from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.stage import corpus_stage
from clusterclip.errors import ClusterClipError
from clusterclip.plan import PlanConfig
from clusterclip.plan.stage import continuation, plan_stage
from clusterclip.report import build_report
from clusterclip.store import RunDir, load_npy
from clusterclip.store import layout as A
from clusterclip.summary import format_summary, summarize
from tests.test_add import add, build_run, new_file

CAP1 = PlanConfig(strategy="clusterclip", max_repeat=1, budget=150)


def one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str], code: int = 2) -> str:
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def embed_argv(run: RunDir, *inputs: Path) -> list[str]:
    return ["embed", *map(str, inputs), "--out", str(run.root), "--embedder", "hashing", "--embed-shard-size", "50",
            "--id-field", "id", "-q"]


# ------------------------------------------------------------ (1) re-running with a subset of the inputs


def test_rerun_without_the_added_inputs_refuses_and_with_them_is_a_no_op(tmp_path, capsys):
    run, old = build_run(tmp_path)
    new = new_file(tmp_path / "new.jsonl", {"sailing": 30})
    add(run, [new])
    records = {s: run.record_path(s).read_bytes() for s in ("corpus", "embed", "cluster")}
    err = one_line_error(embed_argv(run, old), capsys)
    assert str(new) in err and "--force" in err and "give those inputs too" in err
    assert {s: run.record_path(s).read_bytes() for s in ("corpus", "embed", "cluster")} == records
    assert main(embed_argv(run, old, new)) == 0  # the whole lineage: nothing to do
    with run.lock(), pytest.raises(ClusterClipError, match=r"option.*id_field.*--force"):
        corpus_stage(run, [old, new], CorpusConfig(), progress=False)  # same inputs, other options
    assert {s: run.record_path(s).read_bytes() for s in ("corpus", "embed", "cluster")} == records
    assert main([*embed_argv(run, old), "--force"]) == 0
    assert run.record(CORPUS_STAGE)["count"] == 150 and "additions" not in run.record(CORPUS_STAGE)


# ----------------------------------------------------------------- (2) rebuild commands include the adds


def test_report_says_on_the_command_line_which_stale_plan_it_left_out(tmp_path, capsys):
    run, _ = build_run(tmp_path)
    (plan,) = [p.name for p in run.path(PLANS_DIR).iterdir()]
    assert main(["cluster", str(run.root), "--k", "3", "-q"]) == 0  # the plan was built on the old clusters
    capsys.readouterr()
    assert main(["report", str(run.root), "-q"]) == 0
    out, err = capsys.readouterr()
    assert out.strip().endswith("report.html")
    (note,) = err.splitlines()
    assert note.startswith("clusterclip: note: the report leaves out or cuts a plan: ") and plan in note, err
    assert f"clusterclip plan {run.root}" in note and note.endswith("plan skipped"), note
    assert ReportRecord.require(run, verify=False).plan_notes == [note.split(": ", 3)[-1]]
    rebuild = re.search(r"`(clusterclip plan [^`]*)`", note).group(1).split()  # the command the note names
    assert main([*rebuild[1:], "-q"]) == 0
    capsys.readouterr()
    assert main(["report", str(run.root), "-q"]) == 0
    assert capsys.readouterr().err == "" and ReportRecord.require(run, verify=False).plan_notes == []


def test_status_prints_the_rebuild_commands_with_every_add_in_order(tmp_path, capsys):
    run, old = build_run(tmp_path)
    first, second = new_file(tmp_path / "a.jsonl", {"sailing": 10}, "a"), new_file(tmp_path / "b.jsonl",
                                                                                   {"finance": 10}, "b", seed=4)
    add(run, [first])
    add(run, [second])
    steps = summarize(run)["lineage"]["rebuild"]
    assert steps[0].startswith("clusterclip embed") and str(old) in steps[0]
    assert steps[1:] == [f"clusterclip cluster {run.root} --k 4", f"clusterclip add {run.root} {first}",
                         f"clusterclip add {run.root} {second}"]
    text = format_summary(summarize(run))
    assert "replay:   the run grew by `clusterclip add`; to rebuild it from its inputs (not needed to use it): " \
           "`clusterclip embed" in text and f"`clusterclip add {run.root} {second}`" in text
    assert not [line for line in text.splitlines() if line.startswith(("rebuild", "stale", "problem"))], text
    assert "added:    10 documents from" in text
    page = build_report(run.root, progress=False).read_text()
    row = re.search(r"<b>inputs</b></td><td>([^<]*)</td>", page)
    assert row and row.group(1) == f"{old.name}, {first.name} (added), {second.name} (added)", row
    # replaying them rebuilds the same documents in the same order
    other = RunDir(tmp_path / "replay")
    for argv in [s.replace(str(run.root), str(other.root)).split() for s in steps]:
        assert main([*argv[1:], "-q"]) == 0
    assert read_column(other, "text") == read_column(run, "text")


# --------------------------------------------------------------------------- (3) no document twice


def test_an_input_already_in_the_run_is_refused_under_any_name(tmp_path, capsys):
    run, old = build_run(tmp_path)
    copy = Path(shutil.copy(old, tmp_path / "renamed.jsonl"))
    for dup in (old, copy, run.path(CORPUS_DIR)):
        err = one_line_error(["add", str(run.root), str(dup), "-q"], capsys)
        assert "same bytes" in err and "--allow-duplicates" in err
    assert run.record(CORPUS_STAGE)["count"] == 150 and not run.path(A.ADD_JOURNAL).exists()


def test_documents_already_in_the_run_are_skipped_and_counted(tmp_path, capsys):
    run, old = build_run(tmp_path)
    rows = [json.loads(line) for line in old.read_text().splitlines()]
    mixed = tmp_path / "mixed.jsonl"  # 20 known texts under new ids, 10 new documents and 3 copies of new ones
    new = new_file(tmp_path / "n.jsonl", {"sailing": 10})
    fresh = [json.loads(line) for line in new.read_text().splitlines()]
    mixed.write_text("".join(json.dumps({**r, "id": f"copy-{r['id']}"}) + "\n" for r in rows[:20]) + new.read_text()
                     + "".join(json.dumps({**r, "id": f"again-{r['id']}"}) + "\n" for r in fresh[:3]))
    assert main(["add", str(run.root), str(mixed), "-q"]) == 0
    assert ("skipped 23 duplicate documents: 20 with a text already in the run and 3 repeating a text earlier in "
            "the new inputs") in capsys.readouterr().out
    texts = read_column(run, "text")
    assert len(texts) == 160 and len(set(texts)) == 160
    assert run.record(CORPUS_STAGE)["additions"][-1]["duplicates_skipped"] == 23
    assert run.record(CORPUS_STAGE)["additions"][-1]["duplicates_within"] == 3
    assert main(["status", str(run.root)]) == 0
    assert "(duplicates skipped: 20 with a text already in the run and 3 repeating" in capsys.readouterr().out
    again = Path(shutil.copy(old, tmp_path / "again.jsonl"))
    again.write_text("".join(json.dumps({**r, "id": f"again-{r['id']}"}) + "\n" for r in rows[:5]))
    assert main(["add", str(run.root), str(again), "--allow-duplicates", "-q"]) == 0
    assert len(read_column(run, "text")) == 165


# ----------------------------------------------- (4) continuations hold the cap over the whole chain


def chain(run: RunDir) -> tuple[str, str, str]:
    with run.lock():
        root = plan_stage(run, CAP1).to_json()["name"]
        cfg, parent = continuation(run, PlanConfig(strategy="clusterclip", max_repeat=1, budget=50), root, 100)
        mid = plan_stage(run, cfg, continues=parent).to_json()["name"]
        cfg, parent = continuation(run, PlanConfig(strategy="clusterclip", max_repeat=1, budget=25), mid, 25)
        last = plan_stage(run, cfg, continues=parent).to_json()
    return root, mid, last["name"]


def order(run: RunDir, name: str) -> np.ndarray:
    return load_npy(run.path(plan_path(name, PLAN_ORDER)))


def test_a_continuation_of_a_continuation_holds_the_cap_over_every_ancestor(tmp_path):
    run, _ = build_run(tmp_path)
    root, mid, last = chain(run)
    drawn = np.bincount(np.concatenate([order(run, root)[:100], order(run, mid)[:25], order(run, last)]),
                        minlength=150)
    assert drawn.max() == 1 and drawn.sum() == 150
    rec = run.record(plan_stage_name(last))
    assert rec["stats"]["max_total_repeat"] == 1
    assert [a["name"] for a in rec["ancestors"]] == [root, mid]
    with run.lock(), pytest.raises(ClusterClipError, match="budget"):
        cfg, parent = continuation(run, PlanConfig(strategy="clusterclip", max_repeat=1, budget=26), mid, 25)
        plan_stage(run, cfg, continues=parent)


def test_a_continuation_stays_usable_when_its_parent_is_replanned_or_deleted(tmp_path):
    from clusterclip.torch import load_plan

    run, _ = build_run(tmp_path)
    _, mid, last = chain(run)
    add(run, [new_file(tmp_path / "new.jsonl", {"sailing": 20})])
    with run.lock():
        plan_stage(run, CAP1)  # the root re-planned in place over all documents
    shutil.rmtree(run.path(plan_path(mid)))
    assert run.stale_reason(plan_stage_name(last)) is None
    assert load_plan(run.root, plan_name=last).shape == (25,)


def test_refit_refuses_to_strand_a_plan_and_a_continuation_after_it_loads(tmp_path, capsys):
    from clusterclip.torch import ClusterClipSampler

    run, _ = build_run(tmp_path)
    add(run, [new_file(tmp_path / "new.jsonl", {"sailing": 40})])
    with run.lock():
        root = plan_stage(run, CAP1).to_json()["name"]
    parent = ClusterClipSampler(run.root, plan_name=root, world_size=1, rank=0)
    parent.set_consumed(60)
    state = parent.state_dict()
    err = one_line_error(["cluster", str(run.root), "--k", "4", "--refit", "-q"], capsys)
    assert "--force" in err and root in err
    assert main(["cluster", str(run.root), "--k", "4", "--refit", "--force", "-q"]) == 0
    assert run.stale_reason(plan_stage_name(root))
    assert main(["plan", str(run.root), "--strategy", "clusterclip", "--max-repeat", "1", "--continue", root,
                 "--consumed", "60", "-q"]) == 0
    (cont,) = [n for n in os.listdir(run.path(PLANS_DIR)) if "-cont-" in n]
    sampler = ClusterClipSampler(run.root, plan_name=cont, world_size=1, rank=0)
    sampler.load_state_dict(state)
    assert len(list(sampler)) == 90  # the rest of the parent, on the new clusters


# ------------------------------------------------------------------------ (5) a killed add, undone


def killed_add(run: RunDir, new: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An add that dies after its journal and the grown tokens were written."""
    import clusterclip.add.workflow as workflow

    def die(*args: object, **kwargs: object) -> None:
        raise RuntimeError("killed")

    with monkeypatch.context() as m:
        m.setattr(workflow, "embed_new", die)
        with pytest.raises(RuntimeError):
            add(run, [new])
    assert run.path(A.ADD_JOURNAL).exists()


def test_a_killed_add_finishes_after_its_input_is_rewritten_or_moved(tmp_path, monkeypatch):
    run, _ = build_run(tmp_path)
    new = new_file(tmp_path / "new.jsonl", {"sailing": 30})
    killed_add(run, new, monkeypatch)
    assert "pending:" in format_summary(summarize(run)) and "--abort" in summarize(run)["pending"]
    new.write_bytes(new.read_bytes())  # same bytes, new modification time
    moved = Path(shutil.move(new, tmp_path / "moved.jsonl"))
    assert add(run, [moved])["documents_added"] == 30
    assert not run.path(A.ADD_JOURNAL).exists() and not any(audit(run).values())


def test_add_abort_restores_the_run_before_the_add(tmp_path, monkeypatch, capsys):
    run, _ = build_run(tmp_path)
    hashes = {s: run.output_hash(s) for s in ("corpus", "embed", "cluster")}
    parts = sorted(run.path(CORPUS_DIR).iterdir())
    killed_add(run, new_file(tmp_path / "new.jsonl", {"sailing": 30}), monkeypatch)
    assert main(["add", str(run.root), "--abort", "-q"]) == 0
    assert "undid the interrupted add" in capsys.readouterr().out
    assert {s: run.output_hash(s) for s in ("corpus", "embed", "cluster")} == hashes
    assert sorted(run.path(CORPUS_DIR).iterdir()) == parts and not run.path(A.ADD_JOURNAL).exists()
    assert not any(audit(run).values()) and load_npy(run.path(TOKENS)).shape == (150,)
    one_line_error(["add", str(run.root), "--abort", "-q"], capsys)  # nothing left to abort


def test_a_damaged_journal_names_abort_which_clears_it(tmp_path, capsys):
    run, _ = build_run(tmp_path)
    run.path(A.ADD_JOURNAL).write_text('{"key": ')
    err = one_line_error(["add", str(run.root), str(new_file(tmp_path / "n.jsonl", {"sailing": 5})), "-q"], capsys)
    assert "damaged" in err and "--abort" in err
    with run.lock():
        assert "damaged" in abort_add(run)
    assert not run.path(A.ADD_JOURNAL).exists() and not any(audit(run).values())


# ---------------------------------------------------------------------------------------- the others


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_fifo_or_folder_in_place_of_a_record_is_one_line_not_a_hang(tmp_path, capsys, kind):
    run, _ = build_run(tmp_path)
    path = run.record_path(CLUSTER_STAGE)
    path.unlink()
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    for argv in (["status", str(run.root)], ["plan", str(run.root), "-q"], ["report", str(run.root), "-q"]):
        assert "in place of a record" in one_line_error(argv, capsys)


def test_a_window_that_cuts_a_long_plan_into_millions_is_refused(tmp_path, capsys):
    run, _ = build_run(tmp_path)
    err = one_line_error(["plan", str(run.root), "--budget", "5000000", "--window", "1", "-q"], capsys)
    assert "--window 50" in err


def test_report_refuses_a_folder_that_is_not_a_run_directory(tmp_path, capsys):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"x")
    assert "not a run directory" in one_line_error(["report", str(folder), "-q"], capsys)
    assert sorted(p.name for p in folder.iterdir()) == ["cat.jpg"]


def test_a_plan_without_its_record_is_reported(tmp_path, capsys):
    run, _ = build_run(tmp_path)
    (name,) = os.listdir(run.path(PLANS_DIR))
    run.path(plan_path(name, PLAN_RECORD)).unlink()
    assert main(["status", str(run.root), "--verify"]) == 1
    out = capsys.readouterr().out
    assert f"plan files without their record {PLAN_RECORD}" in out and name in out


def test_an_edited_record_is_reported_as_edited_not_rebuilt(tmp_path):
    run, _ = build_run(tmp_path)
    rec = run.record(CLUSTER_STAGE)
    labels = {**rec["artifacts"][LABELS], "sha256": "0" * 64}
    edited = {**rec, "artifacts": {**rec["artifacts"], LABELS: labels}}
    run.record_path(CLUSTER_STAGE).write_text(json.dumps(edited))
    (name,) = os.listdir(run.path(PLANS_DIR))
    why = run.stale_reason(plan_stage_name(name))
    assert "modified by hand" in why and "rebuilt" not in why.split(";")[0]


def test_the_default_corpus_has_a_fixed_identity(tmp_path):
    run = RunDir(tmp_path / "default")
    with run.lock():
        rec = corpus_stage(run, (), CorpusConfig(), progress=False).to_json()
    assert rec["input_hashes"] == ["default-corpus"]


# ------------------------------------------------------------------------------------------ disk full


def _enospc(*args: object, **kwargs: object) -> None:
    raise OSError(28, "No space left on device", "/full/file.npy")


def test_disk_full_inside_add_after_its_journal_is_one_line_and_resumable(tmp_path, monkeypatch, capsys):
    import clusterclip.add.workflow as workflow

    run, _ = build_run(tmp_path)
    new = new_file(tmp_path / "new.jsonl", {"sailing": 30})
    with monkeypatch.context() as m:
        m.setattr(workflow, "embed_new", _enospc)
        err = one_line_error(["add", str(run.root), str(new), "-q"], capsys)
    assert "disk is full" in err and "/full/file.npy" in err and "run the same command again" in err
    assert run.path(A.ADD_JOURNAL).exists()
    assert main(["add", str(run.root), str(new), "-q"]) == 0  # space freed: the same command finishes it
    assert not run.path(A.ADD_JOURNAL).exists() and not any(audit(run).values())


def test_disk_full_while_writing_an_embedding_shard_is_one_line(tmp_path, monkeypatch, capsys):
    import clusterclip.embed.stage as embed_stage

    corpus = new_file(tmp_path / "c.jsonl", {"cooking": 60, "sailing": 40})
    run = RunDir(tmp_path / "run")
    with monkeypatch.context() as m:
        m.setattr(embed_stage, "save_npy", _enospc)
        err = one_line_error(embed_argv(run, corpus), capsys)
    assert "disk is full" in err and "finished shards are kept" in err
    assert main(embed_argv(run, corpus)) == 0


def test_with_an_add_pending_the_other_commands_name_the_add_not_a_rebuild(tmp_path, monkeypatch, capsys):
    """Killed after it rewrote the corpus and embed records, the add leaves the cluster stage looking stale: plan,
    export and dedup must say to finish or undo the add, not to rebuild a stage."""
    import dataclasses

    import clusterclip.add.workflow as workflow

    run, _ = build_run(tmp_path)

    def die(*args: object, **kwargs: object) -> None:
        raise RuntimeError("killed")

    table = tuple(dataclasses.replace(e, grow=die) if e.name == CLUSTER_STAGE else e for e in workflow.TABLE)
    with monkeypatch.context() as m:
        m.setattr(workflow, "TABLE", table)
        with pytest.raises(RuntimeError):
            add(run, [new_file(tmp_path / "new.jsonl", {"sailing": 30})])
    assert run.path(A.ADD_JOURNAL).exists()
    for argv in (["plan", str(run.root), "-q"], ["dedup", str(run.root), "-q"],
                 ["export", str(run.root), "--format", "jsonl", "--dest", str(tmp_path / "x"), "-q"]):
        err = one_line_error(argv, capsys)
        assert "an add is pending" in err and "--abort" in err and "--force" not in err, (argv, err)


def test_abort_after_a_kill_before_the_journal_removes_the_new_parts(tmp_path, capsys):
    """An add killed after it wrote its new corpus part but before its journal changed no record; `--abort` removes
    the part (no file of the add is left behind) instead of saying there is nothing to abort."""
    run, _ = build_run(tmp_path)
    parts = sorted(run.path(CORPUS_DIR).iterdir())
    stray = run.path(CORPUS_DIR) / parts[-1].name.replace("00000", "00001")
    shutil.copy(parts[-1], stray)
    hashes = {s: run.output_hash(s) for s in ("corpus", "embed", "cluster")}
    assert main(["add", str(run.root), "--abort", "-q"]) == 0
    assert "killed before its journal" in capsys.readouterr().out
    assert sorted(run.path(CORPUS_DIR).iterdir()) == parts and not any(audit(run).values())
    assert {s: run.output_hash(s) for s in ("corpus", "embed", "cluster")} == hashes
    one_line_error(["add", str(run.root), "--abort", "-q"], capsys)  # now nothing is left
