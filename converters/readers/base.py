"""What a format's reader is: one ``Reader`` declaration per format module (its ``READER``), so
that discovery, the reading and the analyses ask a reader's fields, never probe its module.

The table of formats (``readers.FORMATS``) names each with its ``Clue``: what a folder of that
format shows by names alone, known before its module is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # types only: the model is the readers' to import, not this declaration's
    from ..errors import Diagnostics
    from ..model import RankInfo, Sample, Slice, StepRecords


class Clue(NamedTuple):
    """What a folder a reader recognises (``sniff``) or warns of (``missing_data``) shows by names
    alone: its own name matches ``named``, or it holds an entry (file or folder) matching ``holds``
    (shell patterns, as the reader's own globs) and not ``except_held`` (another format's files,
    which the reader never reads). A clue is necessary, never sufficient: the reader's ``sniff``
    decides. ``tests/test_startup.py`` checks that every folder a reader recognises in the real
    samples and the fixtures shows its clue."""

    named: tuple[str, ...] = ()
    holds: tuple[str, ...] = ()
    except_held: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reader:
    """One format's reader: how its folders and files are recognised, how its ranks are found and
    read, and what else it can say. The optional capabilities are None (or False) where the
    format has none; their users then do without (no memory, no link matrix, ...)."""

    name: str
    """The format's name: its module's, and the ``format`` of the ``RankInfo``s it finds."""
    folder: str
    """What a folder of its ranks holds, in words, for the message when nothing is found."""
    sniff: Callable[[Path], bool]
    """``sniff(folder)``: whether ``folder`` is one of its ranks' (with ``files``: holds its files)."""
    rank_infos: Callable[[Path, Diagnostics | None], list[RankInfo]]
    """``rank_infos(folder, diag)``: the ranks of a folder ``sniff`` recognised."""
    read: Callable[..., Iterator[StepRecords]]
    """``read(rank, diag, *, detail=True)`` (and ``step_marker=`` where ``step_marker``): the
    rank's records, step by step in time order."""

    lone_files: tuple[str, ...] = ()
    """The files it reads passed alone, in words, for the message that a file is none of them."""
    lone_file: Callable[[Path, Diagnostics | None], RankInfo | list[RankInfo] | None] | None = None
    """``lone_file(path, diag)``: the rank of a file passed alone, as these files travel (attached
    to an issue, copied off a cluster without their folder), or its ranks where one file holds
    several (an XSpace: one per device plane); None: not its file."""
    missing_data: Callable[[Path], tuple[str, str] | None] | None = None
    """``missing_data(folder)``: why a folder that is a rank's by its name holds nothing to read (a
    warning and its subject); None: it holds something, or is none of its ranks'."""
    files: bool = False
    """It reads the files of a folder, one rank each, and the walk goes on into the subfolders (a
    mixed folder: Ascend ranks beside GPU traces)."""
    attach: Callable[..., Iterable[StepRecords]] | None = None
    """Its ranks are the host side of device ranks: discovery joins them to the device ranks of the
    same id rather than letting them compete, and ``attach(steps, rank, diag, *, min_level)`` adds
    its records to a device rank's steps (host_info)."""
    host_memory: Callable[[RankInfo, Diagnostics], Iterator[Sample]] | None = None
    """``host_memory(rank, diag)``: the host's memory of the rank, as samples (host_info)."""
    step_marker: bool = False
    """``read`` takes ``step_marker=NAME``: the user's annotation as the step (``--step-marker``)."""
    memory: Callable[[RankInfo, Diagnostics], Iterator[Slice | Sample]] | None = None
    """``memory(rank, diag)``: the rank's device memory records, read apart from its steps (they
    are not filed by step): counters (``model.memory_counter``) and allocations (``Layer.MEMORY``)."""
    memory_in_read: bool = False
    """``read`` takes ``memory=feed`` (``readers.MemoryFeed``) and hands it the records ``memory``
    gives as its first pass over each file meets them: in a detail read, the file read once for
    both (Kineto's ``[memory]`` events lie among its other events)."""
    memory_from: str | None = None
    """Where it finds memory records, in words, for the message that it found none (None: the
    Ascend files' and tables' names)."""
    ops_in_detail_only: bool = False
    """Its device tasks' op types (or the host operators that stand for them) are read in detail
    only (``readers.for_ops``)."""
    with_op_types: Callable[[RankInfo], RankInfo] | None = None
    """``with_op_types(rank)``: the rank as read for its op types, where another of its files
    names them better (``readers.for_ops``)."""
    host_ops_in_detail: bool = False
    """Where a rank shows no device work, its host operators are there in a detail read (Kineto's
    CPU runs; ``readers.host_ops_in_detail``)."""
    kernel_types: Callable[[RankInfo, Diagnostics], Iterator[tuple[int, int, dict[tuple[int, str], str]]]] \
        | None = None
    """``kernel_types(rank, diag)``: where the file it reads names no op type of its device tasks
    and another file does, those op types by (start ns, name), a step of that file at a time in
    time order with its first start and last end (the critical path's what-ifs)."""
    links: Callable[[RankInfo, Diagnostics], tuple[str, Iterable] | None] | None = None
    """``links(rank, diag)``: the link matrix the profiler itself wrote for the rank (the file's
    name in words, its ``readers.MatrixLink``s; None: none), for ranks whose records hold no plane
    tasks to compute it from."""
