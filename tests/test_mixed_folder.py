"""A folder holding two profilers' output is read as one reader's, and the other's files are said
unread (before, a Kineto trace beside a rocprof result was dropped without a word)."""

from __future__ import annotations

import shutil

import pytest

from converters import Diagnostics, discover
from tests.conftest import real_data


@pytest.mark.parametrize(("read", "unread"), [("rocprof-908", "kineto-2rank"),
                                              ("kineto-2rank", "nsys-cloverleaf")])
def test_the_other_profiler_s_files_are_said_unread(read, unread, tmp_path):
    for sample in (read, unread):
        for f in real_data(sample).iterdir():
            if f.suffix in (".gz", ".json", ".sqlite"):
                shutil.copy(f, tmp_path / f.name)
    diag = Diagnostics()
    ranks = discover(tmp_path, diag)
    [warning] = [w for w in diag.messages() if "not read" in w]
    formats = {"rocprof-908": "rocprof", "kineto-2rank": "kineto", "nsys-cloverleaf": "nsys"}
    assert {r.format for r in ranks} == {formats[read]}
    assert f"also holds {formats[unread]} output" in warning and str(tmp_path) in warning


def test_a_real_sample_s_folder_warns_of_nothing_unread():
    for sample in ("ascend-pt-2rank", "msprof-2rank", "kineto-2rank", "mindspore-1x", "paddle-cpu-chrome"):
        diag = Diagnostics()
        discover(real_data(sample), diag)
        assert not [w for w in diag.messages() if "not read" in w], sample
