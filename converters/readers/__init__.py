"""Input formats. Each module exposes ``NAME``, ``sniff``, ``rank_infos`` and ``read``, and says
what it recognises, so discovery (``converters.discover``) holds no format knowledge:

- ``sniff(folder)``: whether a folder is one of its ranks' (or, with ``FILES``, holds its files);
  ``FOLDER``: what such a folder holds, in words, for the message when nothing is found;
- ``LONE_FILES`` and ``lone_file(path, diag)`` (optional): the files it reads passed alone, as
  these files travel (attached to an issue, copied off a cluster without their folder), in words,
  and the rank of one (None: not its file);
- ``OPS_IN_DETAIL_ONLY`` (optional, default False): its device tasks' op types (or the host
  operators that stand for them) are read in detail only; ``with_op_types(rank)`` (optional): the
  rank as read for its op types, where another of its files names them better (``for_ops``);
  ``HOST_OPS_IN_DETAIL`` (optional): where a rank shows no device work, its host operators are
  there in a detail read (Kineto's CPU runs; ``host_ops_in_detail``);
- ``kernel_types(rank, diag)`` (optional): where the file it reads names no op type of its device
  tasks and another file does, those op types by (start ns, name), a step of that file at a time
  in time order with its first start and last end (``kernel_types``; the critical path's what-ifs);
- ``links(rank, diag)`` (optional): the link matrix the profiler itself wrote for the rank
  (``MatrixLink``s), for ranks whose records hold no plane tasks to compute it from; ``LINKS_FROM``:
  that file, in words;
- ``memory(rank, diag)`` (optional): the rank's device memory records, read apart from its steps
  (they are not filed by step): counters (``model.memory_counter``) and allocations (``Layer.MEMORY``);
- ``missing_data(folder)`` (optional): why a folder that is a rank's by its name holds nothing to
  read, and which rank it is, to warn of (None: it holds something, or is none of its ranks').

``READERS`` names them from the most to the least specific; discovery asks each in turn. A
reader with ``ATTACHES`` (host_info) adds to the device ranks of the same id rather than
competing with them. A reader with ``FILES`` (kineto, paddle) reads files of a folder, one rank each,
and the folder's subfolders are still walked (a mixed folder: Ascend ranks beside GPU traces).

A reader's module is imported when it is first needed (``reader``): for a folder, only once the
folder shows its ``CLUES`` (names alone, no file opened), so that a command on a MindSpore 1.x
folder loads no SQLite, msgspec or Chrome-trace reader (issue 28's start-up).
"""

import fnmatch
import importlib
import re
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from ..errors import Diagnostics, InputError
from ..model import MEMORY_SIZE_ARG, Layer, RankInfo, Sample, Slice, StepRecords, memory_counter
from . import collectives
from .common.spill import by_time

READERS = ("ascend_pt", "msprof", "mindspore1x", "mindspore_cpu", "host_info", "kineto", "paddle")


class Clue(NamedTuple):
    """What a folder a reader recognises (``sniff``) or warns of (``missing_data``) shows by names
    alone: its own name matches ``named``, or it holds an entry (file or folder) matching ``holds``
    (shell patterns, as the reader's own globs). A clue is necessary, never sufficient: the reader's
    ``sniff`` decides. ``tests/test_startup.py`` checks that every folder a reader recognises in the
    real samples and the fixtures shows its clue."""

    named: tuple[str, ...] = ()
    holds: tuple[str, ...] = ()


CLUES = {
    "ascend_pt": Clue(named=("*_ascend_pt", "*_ascend_ms"),
                      holds=("profiler_info*.json", "kernel_details.csv")),  # a loose pair too
    "msprof": Clue(named=("device_*",), holds=("msprof_*.db", "mindstudio_profiler_output")),
    "mindspore1x": Clue(holds=("output_timeline_data_*.txt", "step_trace_raw_*_detail_time.csv",
                               "hccl_info")),
    "mindspore_cpu": Clue(holds=("cpu_timeline_display_*.json",)),
    "host_info": Clue(named=("host_info",)),
    "kineto": Clue(holds=("*.json", "*.json.gz")),
    "paddle": Clue(holds=("*.paddle_trace.json", "*.paddle_trace.pb")),
}


@cache
def reader(name: str) -> ModuleType:
    """The reader of that ``NAME`` (a ``RankInfo``'s ``format``), its module imported on first use."""
    return importlib.import_module(f".{name}", __name__)


def candidates(folder: Path, names: Iterable[str]) -> Iterator[ModuleType]:
    """The readers whose clue ``folder`` shows (``names``: what it holds), most specific first,
    each imported as it is reached."""
    held = list(names)
    for name in READERS:
        named, holds = _patterns(name)
        if (named and named.match(folder.name)) or (holds and any(holds.match(n) for n in held)):
            yield reader(name)


@cache
def _patterns(name: str) -> tuple[re.Pattern[str] | None, re.Pattern[str] | None]:
    """The reader's clue as two patterns: its folder's name, a name the folder holds."""
    clue = CLUES[name]
    return _compiled(clue.named), _compiled(clue.holds)


def _compiled(globs: tuple[str, ...]) -> re.Pattern[str] | None:
    return re.compile("|".join(map(fnmatch.translate, globs))) if globs else None


def every_reader() -> list[ModuleType]:
    """Every reader, imported: for what is said when none recognised the input."""
    return [reader(name) for name in READERS]


def looked_for() -> str:
    """What discovery looked for, for the "nothing recognisable" message."""
    return "; ".join(f"{r.NAME}: {r.FOLDER}" for r in every_reader())


def read_alone() -> str:
    """What can be read alone, for the message that a file passed alone is none of them."""
    lone = [name for r in every_reader() for name in getattr(r, "LONE_FILES", ())]
    return f"{', '.join(lone[:-1])} or {lone[-1]}"


def for_ops(rank: RankInfo) -> tuple[RankInfo, bool]:
    """How to read a rank for its operator statistics (``analyses.ops``): the rank as its reader
    reads it for op types, and whether that needs a detail read."""
    module = reader(rank.format)
    with_op_types = getattr(module, "with_op_types", None)
    rank = rank if with_op_types is None else with_op_types(rank)
    return rank, getattr(module, "OPS_IN_DETAIL_ONLY", False)


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
    found = getattr(reader(rank.format), "links", None)
    found = None if found is None else found(rank, diag)
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
    return getattr(reader(rank.format), "HOST_OPS_IN_DETAIL", False)


def kernel_types(rank: RankInfo, diag: Diagnostics) -> Iterator[tuple[int, int, dict[tuple[int, str], str]]]:
    """The op types of a rank's device tasks that its reader finds in another file than the one
    it reads (none for most readers)."""
    found = getattr(reader(rank.format), "kernel_types", None)
    return found(rank, diag) if found is not None else iter(())


# Allocations drawn in detail traces: those of 1 MiB and more. A training step makes thousands of
# small ones (scalars, index tensors) that hold almost nothing of the peak and would bury the few
# that do under hundreds of sub-lanes; the table (``trace2perfetto memory --allocations``) has them all.
DRAWN_ALLOCATION_BYTES = 1 << 20
HOST = "Host"  # the component of host memory in ``trace2perfetto memory``: the process's resident memory


def memory(rank: RankInfo, diag: Diagnostics) -> Iterator[Slice | Sample]:
    """A rank's device memory records, as its reader gives them (none where it reads no memory)."""
    read = getattr(reader(rank.format), "memory", None)
    return read(rank, diag) if read is not None else iter(())


def host_memory(rank: RankInfo, diag: Diagnostics) -> Iterator[Sample]:
    """The rank's host memory (host_info's), as the ``HOST`` component's Allocated counter."""
    for sample in reader("host_info").host_memory(rank, diag):
        yield sample._replace(lane=memory_counter(HOST, "Allocated"))


def memory_sources(rank: RankInfo) -> str:
    """Where the rank's reader finds memory records, in words: for the message that it found none."""
    default = "memory_record.csv, operator_memory.csv or memory tables"
    return getattr(reader(rank.format), "MEMORY_FROM", default)


def with_memory(steps: Iterable[StepRecords], rank: RankInfo, diag: Diagnostics) -> Iterable[StepRecords]:
    """The steps (in time order) with the rank's memory counters and its allocations of
    ``DRAWN_ALLOCATION_BYTES`` and more added, each to the step it falls in (``spill.by_time``). A
    memory file broken beyond recovery is a warning: the rank's other records are drawn."""
    if getattr(reader(rank.format), "memory", None) is None:
        return steps

    def drawn(batch: list[Slice | Sample]) -> list[Slice | Sample]:
        return [r for r in batch if type(r) is Sample or r.layer is not Layer.MEMORY
                or _size(r) >= DRAWN_ALLOCATION_BYTES]

    def fill(add) -> None:
        batch: list[Slice | Sample] = []
        try:
            for r in memory(rank, diag):
                batch.append(r)
                if len(batch) >= 10_000:
                    add(drawn(batch))
                    batch = []
        except InputError as e:  # broken memory files cost the trace its memory, not the rank
            diag.warn("bad_memory", f"{e}; rank {rank.rank}'s memory is drawn only up to there")
        add(drawn(batch))

    return by_time(steps, rank.rank, fill)


def _size(s: Slice) -> float:
    return s.args.get(MEMORY_SIZE_ARG, 0) if isinstance(s.args, dict) else 0
