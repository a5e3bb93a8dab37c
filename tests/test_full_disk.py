"""A full disk names what could not be written (issue 39): the temporary folder, with TMPDIR as
the way out, where the conversion's spool or a reader's spill cannot be written; the output where
it cannot. Never "cannot read" an input, never an unknown path. ENOSPC is injected at the write
(a small filesystem needs root to mount)."""

from __future__ import annotations

import builtins
import errno
import os
import tempfile
import types

import pytest

from converters import spool
from converters.cli import main
from converters.readers.common import spill
from fixtures.kineto_gen import write_kineto_traces


class _Full:
    """A file on a full disk: it opens, and every write fails as the kernel's would."""

    def __init__(self, file) -> None:
        self._file = file

    def write(self, data) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __enter__(self):
        return self

    def __exit__(self, *_) -> None:
        self._file.close()


@pytest.fixture
def job(tmp_path):
    write_kineto_traces(tmp_path / "job", ranks=2, steps=3)
    return tmp_path / "job"


def _says_the_temporary_folder(err: str) -> None:
    assert "cannot write temporary files: No space left on device" in err
    assert "TMPDIR" in err and tempfile.gettempdir() in err
    assert "cannot read" not in err and "?" not in err.split("error:")[1]


def test_a_full_disk_under_the_spool_names_the_temporary_folder(job, tmp_path, monkeypatch, capsys):
    def opening(path, mode="r", *args, **kwargs):
        file = builtins.open(path, mode, *args, **kwargs)
        return _Full(file) if "w" in mode else file

    monkeypatch.setattr(spool, "open", opening, raising=False)
    assert main([str(job), "-o", str(tmp_path / "out.pftrace"), "-q"]) == 1
    _says_the_temporary_folder(capsys.readouterr().err)
    assert not (tmp_path / "out.pftrace").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["job"]  # nothing left behind


def test_a_full_disk_under_a_readers_spill_names_the_temporary_folder(job, monkeypatch, capsys):
    monkeypatch.setattr(spill, "tempfile", types.SimpleNamespace(
        TemporaryFile=lambda **kwargs: _Full(tempfile.TemporaryFile(**kwargs))))
    assert main(["info", str(job)]) == 1
    _says_the_temporary_folder(capsys.readouterr().err)


def test_a_full_output_disk_names_the_output(job, tmp_path, monkeypatch, capsys):
    fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, *args, **kwargs: _Full(fdopen(fd, *args, **kwargs)))
    target = tmp_path / "out.pftrace"
    assert main([str(job), "-o", str(target), "-q"]) == 1
    err = capsys.readouterr().err
    assert f"cannot write {target}: No space left on device" in err and "TMPDIR" not in err
    assert [p.name for p in tmp_path.iterdir()] == ["job"]
