"""Every unusable ``--tokenizer`` and ``--seq-len`` is one line naming the fix, never a traceback or a hang."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from clusterclip.cli.main import main
from clusterclip.errors import ClusterClipError
from clusterclip.export.stage import ExportConfig, export_plan
from clusterclip.export.tokenizer import TokenizerError, load
from clusterclip.export.writers.registry import WRITERS
from tests.test_export import _run
from tests.test_export_formats import _tokenizer

pytest.importorskip("tokenizers")


def _bad(tmp_path, kind: str) -> str:
    if kind == "missing path":
        return str(tmp_path / "nope")
    if kind == "missing json":
        return "nope.json"
    if kind == "empty folder":
        (tmp_path / "empty").mkdir()
        return str(tmp_path / "empty")
    if kind in ("malformed", "binary", "not a tokenizer"):
        path = tmp_path / "tokenizer.json"
        body = {"malformed": b"{not json", "binary": b"\x00\xff\xfe" * 9, "not a tokenizer": b'{"a": 1}'}[kind]
        path.write_bytes(body)
        return str(path)
    return {"offline hub name": "no-such-org/no-such-tokenizer-xyz", "empty": "", "blank": "  "}[kind]


KINDS = ["missing path", "missing json", "empty folder", "malformed", "binary", "not a tokenizer",
         "offline hub name", "empty", "blank"]


@pytest.mark.parametrize("kind", KINDS)
def test_unusable_tokenizer_is_one_line(tmp_path, kind, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(TokenizerError) as err:
        load(_bad(tmp_path, kind))
    assert "\n" not in str(err.value) and "--tokenizer" in str(err.value)


@pytest.mark.parametrize("kind", ["missing path", "malformed", "offline hub name", "empty"])
def test_cli_export_with_an_unusable_tokenizer_exits_2(tmp_path, kind, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run, cfg, _ = _run(tmp_path)
    code = main(["export", str(run.root), "--plan", cfg.name(), "--format", "jsonl", "--tokenizer",
                 _bad(tmp_path, kind), "--dest", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "--tokenizer" in err
    assert not (tmp_path / "out").exists()


def test_seq_len_beyond_the_limit_is_refused_by_the_settings():
    with pytest.raises(ClusterClipError, match="at most 16,777,216"):
        ExportConfig(tokenizer="t", seq_len=10**12)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "litdata", "megatron"])
def test_seq_len_longer_than_the_stream_is_refused_and_leaves_nothing(tmp_path, fmt):
    if fmt == "litdata":
        pytest.importorskip("litdata")
    if fmt == "megatron":
        pytest.importorskip("megatron.core")
    run, cfg, _ = _run(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(ClusterClipError, match="longer than the plan's whole token stream"):
        export_plan(run, cfg.name(), out, fmt=fmt, tokenizer=_tokenizer(tmp_path), seq_len=100_000)
    assert not out.exists() or not any(p.name != ".lock" for p in out.iterdir())


@pytest.mark.parametrize(("fmt", "module", "extra"), [
    ("hf", "datasets", "pip install 'clusterclip[hf]'"),
    ("megatron", "megatron.core.datasets.indexed_dataset", "pip install 'clusterclip[export]'"),
    ("litdata", "litdata.streaming.writer", "pip install --no-deps litdata==0.2.76")])
def test_missing_format_library_names_what_installs_it(tmp_path, monkeypatch, fmt, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    with pytest.raises(ClusterClipError) as err:
        WRITERS[fmt](tmp_path, np.dtype(np.uint16))
    assert extra in str(err.value) and f"--format {fmt}" in str(err.value)
