"""The cache of slow generated profiles: made once per generator and arguments, again when either
changes or when a run died half-way; two processes asking at once make it once."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import fixture_cache


def _write(folder: Path, n: int, *, text: str = "x") -> dict:
    """A generator: a file, and a count of the calls in a file beside the cache."""
    calls = folder.parent / "calls"
    calls.write_text(calls.read_text() + "." if calls.exists() else ".")
    (folder / "profile.txt").write_text(text * n)
    return {"n": n, "path": folder / "profile.txt"}


def _calls(cache: Path) -> int:
    return len((cache / "calls").read_text())


def test_a_profile_is_made_once_per_generator_and_arguments(tmp_path, monkeypatch):
    monkeypatch.setattr(fixture_cache, "CACHE", tmp_path)
    folder, made = fixture_cache.cached(_write, 3, text="ab")
    assert made == {"n": 3, "path": folder / "profile.txt"} and made["path"].read_text() == "ababab"
    assert fixture_cache.cached(_write, 3, text="ab") == (folder, made) and _calls(tmp_path) == 1
    other, _ = fixture_cache.cached(_write, 4, text="ab")
    assert other != folder and _calls(tmp_path) == 2


def test_a_profile_a_killed_run_left_half_made_is_made_again(tmp_path, monkeypatch):
    monkeypatch.setattr(fixture_cache, "CACHE", tmp_path)
    folder, _ = fixture_cache.cached(_write, 2)
    folder.with_suffix(".pickle").unlink()  # as when the run died before recording the result
    (folder / "stray").write_text("left over")
    again, made = fixture_cache.cached(_write, 2)
    assert again == folder and not (folder / "stray").exists() and _calls(tmp_path) == 2
    assert made["path"].read_text() == "xx"


def _slow_write(folder: Path, n: int) -> dict:
    time.sleep(1)  # long enough for the other process to ask meanwhile
    return _write(folder, n)


def _ask(cache: str) -> None:
    fixture_cache.CACHE = Path(cache)
    fixture_cache.cached(_slow_write, 5)


def test_two_processes_asking_at_once_make_it_once(tmp_path):
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_ask, args=(str(tmp_path),)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [w.exitcode for w in workers] == [0, 0] and _calls(tmp_path) == 1
