"""The spool: encoded chunks (one per rank, step and kind) written to temporary files while the
input is read, so that memory holds only their index (``Chunk``). The conversion spools every rank's
chunks (one ``SpoolFile`` per worker, its chunks gathered in the driver's ``Spool``) for the size cap
to assemble (``budget.assemble``); the analyses that read ranks in workers stash what a worker
finds there too (``SpoolFile.stash``, ``Spool.unstash``: comm, critical, the report's detail read,
``convert --critical-path``), so a worker hands back where its bytes lie, not the bytes."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .errors import temporary_writes
from .model import StepKey

SUMMARY, DETAIL = "summary", "detail"  # a chunk's kind: the summary, or the detail a size cap may drop
_COPY_BLOCK = 1 << 20


@dataclass(frozen=True, slots=True)
class Chunk:
    """Where one encoded chunk (one rank, step and kind) lies in the spool."""

    step: StepKey | None  # the step as the job names it
    start_ns: int
    rank: int
    kind: str  # SUMMARY or DETAIL
    path: str
    offset: int
    length: int
    slices: int
    sequence: tuple[int, int] = (0, 0)  # (rank, packet sequence): chunks that share interning
    ordinal: int = 0  # its place in its sequence: a chunk needs all earlier ones before it
    graph: int | None = None  # the graph id as its rank numbers it (to name the step in messages)
    part: int = 0  # which part of its step it holds (``StepRecords.part``): the cap keeps parts in order


UNWRITTEN = -1  # the length of a chunk not encoded: it never fits (SpoolFile.add_unwritten)


class SpoolFile:
    """Appends encoded chunks to one spool file and indexes them (one per worker process)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.chunks: list[Chunk] = []
        self._file: BinaryIO | None = None
        self._end = 0
        self._ordinals: dict[tuple[int, int], int] = {}

    def __enter__(self) -> SpoolFile:
        with temporary_writes(self.path):
            self._file = open(self.path, "wb", buffering=1 << 20)  # noqa: SIM115
        return self

    def __exit__(self, *_: object) -> None:
        with temporary_writes(self.path):
            self._file.close()

    def add(self, step: StepKey | None, start_ns: int, rank: int, kind: str, data: bytes, slices: int,
            sequence: int = 0, graph: int | None = None, part: int = 0) -> None:
        if data:
            with temporary_writes(self.path):
                self._file.write(data)
            ordinal = self._ordinals[rank, sequence] = self._ordinals.get((rank, sequence), -1) + 1
            self.chunks.append(Chunk(step, start_ns, rank, kind, self.path, self._end, len(data), slices,
                                     (rank, sequence), ordinal, graph, part))
            self._end += len(data)

    def add_unwritten(self, step: StepKey | None, start_ns: int, rank: int, kind: str, slices: int,
                      sequence: int = 0, graph: int | None = None, part: int = 0) -> None:
        """A chunk that was not encoded because the cap could never take it: it holds its place
        in its sequence and makes its step's group not fit (length -1)."""
        ordinal = self._ordinals[rank, sequence] = self._ordinals.get((rank, sequence), -1) + 1
        self.chunks.append(Chunk(step, start_ns, rank, kind, self.path, self._end, UNWRITTEN, slices,
                                 (rank, sequence), ordinal, graph, part))

    def stash(self, data: bytes) -> tuple[int, int]:
        """Keep ``data`` (no chunk) for ``Spool.unstash``: where it lies, as (offset, length)."""
        with temporary_writes(self.path):
            self._file.write(data)
        self._end += len(data)
        return self._end - len(data), len(data)


def spooled(run: Callable[[str], tuple], path: str | None) -> tuple:
    """``run(path)``'s result and None, where the command gave a spool file it can read; with no
    path (a worker on another machine), ``run`` on a temporary file of the worker's own, and that
    file's bytes for ``Spool.adopt``."""
    if path is not None:
        return (*run(path), None)
    with temporary_writes(), tempfile.NamedTemporaryFile(prefix="trace2perfetto-", suffix=".spool",
                                                         delete=False) as own:
        pass
    try:
        return (*run(own.name), Path(own.name).read_bytes())
    finally:
        os.unlink(own.name)


class Spool:
    """A temporary directory of spool files, and the index of every chunk in them."""

    def __init__(self) -> None:
        with temporary_writes():
            self._dir = tempfile.TemporaryDirectory(prefix="trace2perfetto-")
        self.chunks: list[Chunk] = []
        self._paths = 0
        self._open: dict[str, BinaryIO] = {}

    def new_file(self) -> str:
        self._paths += 1
        return os.path.join(self._dir.name, f"{self._paths}.spool")

    def read(self, chunk: Chunk) -> Iterator[bytes]:
        """The chunk's bytes in blocks of at most 1 MiB."""
        file = self._open.get(chunk.path)
        if file is None:
            file = self._open[chunk.path] = open(chunk.path, "rb")  # noqa: SIM115
        file.seek(chunk.offset)
        left = chunk.length
        while left:
            block = file.read(min(left, _COPY_BLOCK))
            left -= len(block)
            yield block

    def adopt(self, data: bytes) -> str:
        """A new spool file holding ``data`` (a remote worker's spool, see ``spooled``): its path."""
        path = self.new_file()
        with temporary_writes(path), open(path, "wb") as file:
            file.write(data)
        return path

    def unstash(self, path: str, offset: int, length: int) -> bytes:
        """What ``SpoolFile.stash`` kept in the spool file ``path``."""
        return b"".join(self.read(Chunk(None, 0, 0, "", path, offset, length, 0)))

    def close(self) -> None:
        for file in self._open.values():
            file.close()
        self._dir.cleanup()
