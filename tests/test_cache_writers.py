"""Two processes making the same cached artefact at once (two servers, two test workers): each
writes under a name of its own and renames; a mask store is built by one while the other waits."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from grammar_tools import cache


def test_a_file_written_aside_appears_whole_or_not_at_all(tmp_path):
    out = tmp_path / "a" / "artefact.bin"
    with cache.written_aside(out) as tmp:
        assert tmp != out and tmp.parent == out.parent
        tmp.write_bytes(b"first")
        assert not out.exists()
    assert out.read_bytes() == b"first"
    with pytest.raises(RuntimeError), cache.written_aside(out) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("interrupted")
    assert out.read_bytes() == b"first"  # the old file stays
    assert sorted(p.name for p in out.parent.iterdir()) == ["artefact.bin"]  # nothing half written


def test_two_writers_get_names_of_their_own(tmp_path):
    out = tmp_path / "artefact.bin"
    with cache.written_aside(out) as one, cache.written_aside(out) as two:
        assert one != two
        one.write_bytes(b"one")
        two.write_bytes(b"two")
    assert out.read_bytes() == b"one"  # the outer block ends last: its rename wins
    assert [p.name for p in tmp_path.iterdir()] == ["artefact.bin"]


def test_a_folder_made_by_another_writer_first_is_kept(tmp_path):
    out = tmp_path / "model"
    with cache.folder_written_aside(out) as mine:
        (mine / "weights").write_text("mine")
        with cache.folder_written_aside(out) as theirs:
            (theirs / "weights").write_text("theirs")
        assert (out / "weights").read_text() == "theirs"
    assert (out / "weights").read_text() == "theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_a_folder_left_by_a_failure_is_removed(tmp_path):
    out = tmp_path / "model"
    with pytest.raises(OSError), cache.folder_written_aside(out) as tmp:
        (tmp / "weights").write_text("half")
        raise OSError("disk full")
    assert list(tmp_path.iterdir()) == []


def _hold(path: str, entered, release) -> None:
    with cache.one_maker(Path(path)):
        entered.set()
        release.wait(30)


def test_one_maker_holds_a_second_process_back(tmp_path):
    out = tmp_path / "store.safetensors"
    ctx = multiprocessing.get_context("spawn")
    entered, release = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold, args=(str(out), entered, release))
    child.start()
    try:
        assert entered.wait(60), "the child never took the lock"
        waited, never = ctx.Event(), ctx.Event()
        second = ctx.Process(target=_hold, args=(str(out), waited, never))
        second.start()
        assert not waited.wait(1.0), "a second maker went in while the first held the lock"
        release.set()
        assert waited.wait(60), "the second maker never went in after the first left"
        second.terminate()
        second.join(10)
    finally:
        release.set()
        child.join(30)
    assert child.exitcode == 0
