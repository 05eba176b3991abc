"""The build's timeline (`mask_store.build_timeline`, `mask-store build --json`'s `phases`) and the
cold build's first step: the tokenizer loaded beside the lexer automaton made in a forked child."""

from __future__ import annotations

import json
import multiprocessing
import time

import pytest

from grammar_tools.grammar import load_grammar
from grammar_tools.lexing import lexer_automaton
from mask_store.build_timeline import Timeline
from mask_store.cli import main as mask_store_main
from mask_store.loading import load_tokenizer_beside_lexer


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_phase_counts_its_wall_its_cpu_and_its_reaped_childrens():
    timeline = Timeline()
    with timeline.phase("alone") as extra:
        _spin(0.2)
        extra["note"] = 1
    with timeline.phase("beside a child"):
        child = multiprocessing.get_context("fork").Process(target=_spin, args=(0.3,))
        child.start()
        child.join()
    with timeline.phase("asleep"):
        time.sleep(0.2)
    alone, forked, asleep = timeline.phases
    assert [p["phase"] for p in timeline.phases] == ["alone", "beside a child", "asleep"]
    assert alone["note"] == 1 and alone["cpu_s"] >= 0.15 and alone["own_cpu_s"] >= 0.15
    assert forked["cpu_s"] >= 0.25 and forked["own_cpu_s"] < 0.15  # the child's CPU, not this process's
    assert asleep["wall_s"] >= 0.15 and asleep["cpu_s"] < 0.1 and asleep["cores"] < 0.5


def test_the_lexer_is_made_in_a_child_while_the_tokenizer_loads(tmp_path, monkeypatch):
    """In a cache without the lexer automaton, the forked child leaves it there: this process
    reads it (the same automaton) instead of making it."""
    monkeypatch.setenv("SYNTAXLOCK_CACHE", str(tmp_path))
    lexer_automaton._load_lexer_automaton.cache_clear()
    try:
        path = lexer_automaton.cache_path(load_grammar())
        assert not path.exists()
        tok = load_tokenizer_beside_lexer("default")
        assert path.is_file() and tok.vocab.size == 49152
        made_beside = lexer_automaton.load_lexer_automaton()
    finally:
        lexer_automaton._load_lexer_automaton.cache_clear()
    assert made_beside.hash == lexer_automaton.load_lexer_automaton().hash


@pytest.mark.slow
def test_build_json_reports_each_phase(tmp_path, capsys):
    """`mask-store build --json` (the full store of the default tokenizer): each phase once,
    with its wall and CPU seconds, and the command's own."""
    out = tmp_path / "s.safetensors"
    assert mask_store_main(["build", "--out", str(out), "--json", "--quiet", "--no-streamline"]) == 0
    info = json.loads(capsys.readouterr().out)
    names = [p["phase"] for p in info["phases"]]
    assert names == ["imports", "tokenizer_beside_lexer", "lexer", "signatures", "walk", "full_assemble", "save"]
    for p in info["phases"]:
        assert p["wall_s"] >= 0 and p["cpu_s"] >= 0 and p["own_cpu_s"] <= p["cpu_s"] + 0.05
    walk = info["phases"][names.index("walk")]
    assert walk["cpu_s"] > walk["own_cpu_s"]  # the forked walk's workers count
    assert info["command_seconds"]["wall_s"] >= sum(p["wall_s"] for p in info["phases"]) - 0.1
