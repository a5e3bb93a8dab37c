"""Input formats: one module per format, each declaring its reader (``READER``, a
``base.Reader``: its name, how its folders and lone files are recognised, how its ranks are found
and read, its optional capabilities), and one table of them (``FORMATS``), so discovery
(``converters.discover``) holds no format knowledge and nothing probes a module for what it can do.

``FORMATS`` names the formats from the most to the least specific, each with its ``Clue``; a
reader's module is imported when it is first needed (``reader``): for a folder, only once the
folder shows its clue (names alone, no file opened), so that a command on a MindSpore 1.x folder
loads no SQLite, msgspec or Chrome-trace reader (issue 28's start-up). Discovery asks the table
once a folder (``recognise``), once a lone file (``lone_file``); the analyses ask it what a rank's
reader can give (``for_ops``, ``links``, ``memory``, ``kernel_types``, ...).
"""

import fnmatch
import importlib
import re
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import NamedTuple

from ..errors import Diagnostics, InputError
from ..model import MEMORY_SIZE_ARG, Layer, RankInfo, Sample, Slice, StepRecords, memory_counter
from . import collectives
from .base import Clue, Reader
from .common.spill import by_time

# The table of formats, most specific first: a format's module (``readers/<name>.py``, declaring
# its ``READER``) and what a folder of it shows by names alone.
FORMATS = {
    "ascend_pt": Clue(named=("*_ascend_pt", "*_ascend_ms"),
                      holds=("profiler_info*.json", "kernel_details.csv")),  # a loose pair too
    "msprof": Clue(named=("device_*",), holds=("msprof_*.db", "mindstudio_profiler_output")),
    "mindspore1x": Clue(holds=("output_timeline_data_*.txt", "step_trace_raw_*_detail_time.csv",
                               "hccl_info")),
    "mindspore_cpu": Clue(holds=("cpu_timeline_display_*.json",)),
    "host_info": Clue(named=("host_info",)),
    "xplane": Clue(holds=("*.xplane.pb",)),
    "rocprof": Clue(holds=("*_results.json", "*_results.json.gz")),
    # Paddle's own files are no Kineto trace: a Paddle folder loads no Kineto reader (issue 44)
    "kineto": Clue(holds=("*.json", "*.json.gz"),
                   except_held=("*.paddle_trace.json", "*.paddle_trace.json.gz")),
    "paddle": Clue(holds=("*.paddle_trace.json", "*.paddle_trace.pb")),
    "nsys": Clue(holds=("*.sqlite",)),
}


@cache
def reader(name: str) -> Reader:
    """The reader of that ``name`` (a ``RankInfo``'s ``format``), its module imported on first use."""
    return importlib.import_module(f".{name}", __name__).READER


def candidates(folder: Path, names: Iterable[str]) -> Iterator[Reader]:
    """The readers whose clue ``folder`` shows (``names``: what it holds), most specific first,
    each imported as it is reached."""
    held = list(names)
    for name in FORMATS:
        named, holds, others = _patterns(name)
        if (named and named(folder.name)) or (holds and any(holds(n) and not (others and others(n))
                                                             for n in held)):
            yield reader(name)


def recognise(folder: Path, names: Iterable[str]) -> Reader | None:
    """The reader whose folder ``folder`` is (``names``: what it holds), the most specific first;
    None where none is."""
    return next((r for r in candidates(folder, names) if r.sniff(folder)), None)


def also_recognise(folder: Path, names: Iterable[str], found: Reader) -> list[Reader]:
    """The other readers that would read ``folder`` (``found`` reads it): their files are not read,
    since one folder is one reader's."""
    return [r for r in candidates(folder, names) if r is not found and r.sniff(folder)]


def missing_data(folder: Path, names: Iterable[str]) -> tuple[str, str] | None:
    """Why a folder no reader recognises, but one knows as a rank's by its name, holds nothing to
    read (a warning and its subject); None if no reader says so."""
    checks = (r.missing_data for r in candidates(folder, names) if r.missing_data is not None)
    return next((found for check in checks if (found := check(folder))), None)


def lone_file(path: Path, diag: Diagnostics | None) -> list[RankInfo] | None:
    """The ranks of a file passed alone (one, but where a file holds several: an XSpace's device
    planes), as the first reader that reads it alone finds them; None where none does."""
    for name in FORMATS:
        read = reader(name).lone_file
        found = read(path, diag) if read is not None else None
        if found is not None:
            return found if isinstance(found, list) else [found]
    return None


Matcher = Callable[[str], bool]  # whether a name matches a clue's shell patterns


@cache
def _patterns(name: str) -> tuple[Matcher | None, Matcher | None, Matcher | None]:
    """The reader's clue as three tests: its folder's name, a name the folder holds, and a name
    held that does not count."""
    clue = FORMATS[name]
    return _matcher(clue.named), _matcher(clue.holds), _matcher(clue.except_held)


def _matcher(globs: tuple[str, ...]) -> Matcher | None:
    """Whether a name matches one of ``globs``, as ``fnmatch.fnmatchcase``. Globs of plain text and
    ``*`` (every clue's) are matched by their pieces: discovery asks every reader's clue, and
    compiling their regexes cost a small command more than its discovery (issue 44)."""
    if not globs:
        return None
    if any(c in glob for glob in globs for c in "?["):
        return re.compile("|".join(map(fnmatch.translate, globs))).match
    split = [glob.split("*") for glob in globs]
    return lambda name: any(_pieces_match(name, pieces) for pieces in split)


def _pieces_match(name: str, pieces: list[str]) -> bool:
    """A glob's ``*``: its first piece starts the name, its last ends it, the others come between,
    in order (each at its first place left: any later one leaves the rest less room)."""
    if len(pieces) == 1:
        return name == pieces[0]
    first, *middle, last = pieces
    end = len(name) - len(last)
    if end < len(first) or not name.startswith(first) or not name.endswith(last):
        return False
    at = len(first)
    for piece in middle:
        at = name.find(piece, at, end)
        if at < 0:
            return False
        at += len(piece)
    return True


def every_reader() -> list[Reader]:
    """Every reader, imported: for what is said when none recognised the input."""
    return [reader(name) for name in FORMATS]


def looked_for() -> str:
    """What discovery looked for, for the "nothing recognisable" message."""
    return "; ".join(f"{r.name}: {r.folder}" for r in every_reader())


def read_alone() -> str:
    """What can be read alone, for the message that a file passed alone is none of them."""
    lone = [name for r in every_reader() for name in r.lone_files]
    return f"{', '.join(lone[:-1])} or {lone[-1]}"


def for_ops(rank: RankInfo) -> tuple[RankInfo, bool]:
    """How to read a rank for its operator statistics (``analyses.ops``): the rank as its reader
    reads it for op types, and whether that needs a detail read."""
    found = reader(rank.format)
    rank = rank if found.with_op_types is None else found.with_op_types(rank)
    return rank, found.ops_in_detail_only


class MatrixLink(NamedTuple):
    """One link of one op (``allreduce-top1``) or of the sum of an op type (``allreduce-total``) as a
    profiler's own link matrix gives it: ``group`` as the file names it, ``source_op`` the op the
    figures are of (None for a sum), ``gb_per_s`` as written."""

    step: int | None
    kind: str  # "collective" or "p2p"
    op: str
    group: str
    src: int
    dst: int
    transport: str
    size_bytes: int
    time_ns: int
    gb_per_s: float
    source_op: str | None


def links(rank: RankInfo, diag: Diagnostics) -> tuple[str, list[MatrixLink]] | None:
    """The link matrix the rank's profiler wrote (where its reader reads one), and the file's name
    in words; None where there is none."""
    read = reader(rank.format).links
    found = None if read is None else read(rank, diag)
    return None if found is None else (found[0], _communicators(list(found[1])))


def _communicators(links: list[MatrixLink]) -> list[MatrixLink]:
    """The links with each group named as the plane tasks' rows name it: by the communicator its
    ops' names say (HCCL's group tag, alike on every rank), where one of them says one."""
    named: dict[str, str] = {}
    for link in links:
        if link.source_op is not None and link.group not in named:
            named[link.group] = collectives.hccl_group(link.source_op) or link.group
    return [link._replace(group=named.get(link.group, link.group)) for link in links]


def host_ops_in_detail(rank: RankInfo) -> bool:
    """Whether a rank whose summary read shows no device work has host operators in a detail read
    (``analyses.ops`` reads it again for them)."""
    return reader(rank.format).host_ops_in_detail


def kernel_types(rank: RankInfo, diag: Diagnostics) -> Iterator[tuple[int, int, dict[tuple[int, str], str]]]:
    """The op types of a rank's device tasks that its reader finds in another file than the one
    it reads (none for most readers)."""
    found = reader(rank.format).kernel_types
    return found(rank, diag) if found is not None else iter(())


# Allocations drawn in detail traces: those of 1 MiB and more. A training step makes thousands of
# small ones (scalars, index tensors) that hold almost nothing of the peak and would bury the few
# that do under hundreds of sub-lanes; the table (``trace2perfetto memory --allocations``) has them all.
DRAWN_ALLOCATION_BYTES = 1 << 20
HOST = "Host"  # the component of host memory in ``trace2perfetto memory``: the process's resident memory


def memory(rank: RankInfo, diag: Diagnostics) -> Iterator[Slice | Sample]:
    """A rank's device memory records, as its reader gives them (none where it reads no memory)."""
    read = reader(rank.format).memory
    return read(rank, diag) if read is not None else iter(())


def host_memory(rank: RankInfo, diag: Diagnostics) -> Iterator[Sample]:
    """The rank's host memory (host_info's), as the ``HOST`` component's Allocated counter."""
    for sample in reader("host_info").host_memory(rank, diag):
        yield sample._replace(lane=memory_counter(HOST, "Allocated"))


def memory_sources(rank: RankInfo) -> str:
    """Where the rank's reader finds memory records, in words: for the message that it found none."""
    default = "memory_record.csv, operator_memory.csv or memory tables"
    return reader(rank.format).memory_from or default


class MemoryFeed:
    """Where a reader that meets its memory records in a pass it makes over its files anyway
    (``Reader.memory_in_read``: ``read(..., memory=feed)``) hands them, for ``with_memory`` to file
    by time: each file read once for both, not twice. The reader hands them all before it yields
    its first step; a record handed on later would be misfiled, so it is an error."""

    def __init__(self) -> None:
        self._add: Callable[[list[Slice | Sample]], None] | None = None

    def __call__(self, records: list[Slice | Sample]) -> None:
        if self._add is None:
            raise RuntimeError("memory records handed on outside the reader's pass before its first step")
        if records:
            self._add(_drawn(records))

    def _open(self, add: Callable[[list[Slice | Sample]], None]) -> None:
        self._add = add

    def _closed_at_first(self, steps: Iterable[StepRecords]) -> Iterator[StepRecords]:
        for batch in steps:
            self._add = None
            yield batch


def memory_feed(rank: RankInfo) -> MemoryFeed | None:
    """A feed for the rank's reader to hand its memory records to as it reads its steps, where it
    can (``Reader.memory_in_read``); None: ``with_memory`` reads them apart."""
    return MemoryFeed() if reader(rank.format).memory_in_read else None


def with_memory(steps: Iterable[StepRecords], rank: RankInfo, diag: Diagnostics,
                feed: MemoryFeed | None = None) -> Iterable[StepRecords]:
    """The steps (in time order) with the rank's memory counters and its allocations of
    ``DRAWN_ALLOCATION_BYTES`` and more added, each to the step it falls in (``spill.by_time``):
    those the reader hands ``feed`` as it reads (``memory_feed``), else read apart first. A memory
    file broken beyond recovery is a warning: the rank's other records are drawn."""
    if reader(rank.format).memory is None:
        return steps
    if feed is not None:
        return by_time(feed._closed_at_first(steps), rank.rank, feed._open)

    def fill(add) -> None:
        batch: list[Slice | Sample] = []
        try:
            for r in memory(rank, diag):
                batch.append(r)
                if len(batch) >= 10_000:
                    add(_drawn(batch))
                    batch = []
        except InputError as e:  # broken memory files cost the trace its memory, not the rank
            diag.warn("bad_memory", f"{e}; rank {rank.rank}'s memory is drawn only up to there")
        add(_drawn(batch))

    return by_time(steps, rank.rank, fill)


def _drawn(batch: list[Slice | Sample]) -> list[Slice | Sample]:
    return [r for r in batch if type(r) is Sample or r.layer is not Layer.MEMORY
            or _size(r) >= DRAWN_ALLOCATION_BYTES]


def _size(s: Slice) -> float:
    return s.args.get(MEMORY_SIZE_ARG, 0) if isinstance(s.args, dict) else 0
