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
- ``memory(rank, diag)`` (optional): the rank's device memory records, read apart from its steps
  (they are not filed by step): counters (``model.memory_counter``) and allocations (``Layer.MEMORY``);
- ``missing_data(folder)`` (optional): why a folder that is a rank's by its name holds nothing to
  read, and which rank it is, to warn of (None: it holds something, or is none of its ranks').

``READERS`` lists them from the most to the least specific; discovery asks each in turn. A
reader with ``ATTACHES`` (host_info) adds to the device ranks of the same id rather than
competing with them. A reader with ``FILES`` (kineto, paddle) reads files of a folder, one rank each,
and the folder's subfolders are still walked (a mixed folder: Ascend ranks beside GPU traces).
"""

from collections.abc import Iterable, Iterator

from ..errors import Diagnostics, InputError
from ..model import MEMORY_SIZE_ARG, Layer, RankInfo, Sample, Slice, StepRecords, memory_counter
from . import ascend_pt, host_info, kineto, mindspore1x, msprof, paddle
from .spill import by_time

READERS = (ascend_pt, msprof, mindspore1x, host_info, kineto, paddle)
BY_NAME = {reader.NAME: reader for reader in READERS}

# What discovery looked for, for the "nothing recognisable" message.
LOOKED_FOR = "; ".join(f"{reader.NAME}: {reader.FOLDER}" for reader in READERS)

# What can be read alone, for the message that a file passed alone is none of them.
_LONE = [name for reader in READERS for name in getattr(reader, "LONE_FILES", ())]
READ_ALONE = f"{', '.join(_LONE[:-1])} or {_LONE[-1]}"


def for_ops(rank: RankInfo) -> tuple[RankInfo, bool]:
    """How to read a rank for its operator statistics (``analyses.ops``): the rank as its reader
    reads it for op types, and whether that needs a detail read."""
    reader = BY_NAME[rank.format]
    with_op_types = getattr(reader, "with_op_types", None)
    rank = rank if with_op_types is None else with_op_types(rank)
    return rank, getattr(reader, "OPS_IN_DETAIL_ONLY", False)


# Allocations drawn in detail traces: those of 1 MiB and more. A training step makes thousands of
# small ones (scalars, index tensors) that hold almost nothing of the peak and would bury the few
# that do under hundreds of sub-lanes; the table (``trace2perfetto memory --allocations``) has them all.
DRAWN_ALLOCATION_BYTES = 1 << 20
HOST = "Host"  # the component of host memory in ``trace2perfetto memory``: the process's resident memory


def memory(rank: RankInfo, diag: Diagnostics) -> Iterator[Slice | Sample]:
    """A rank's device memory records, as its reader gives them (none where it reads no memory)."""
    read = getattr(BY_NAME[rank.format], "memory", None)
    return read(rank, diag) if read is not None else iter(())


def host_memory(rank: RankInfo, diag: Diagnostics) -> Iterator[Sample]:
    """The rank's host memory (host_info's), as the ``HOST`` component's Allocated counter."""
    for sample in host_info.host_memory(rank, diag):
        yield sample._replace(lane=memory_counter(HOST, "Allocated"))


def memory_sources(rank: RankInfo) -> str:
    """Where the rank's reader finds memory records, in words: for the message that it found none."""
    default = "memory_record.csv, operator_memory.csv or memory tables"
    return getattr(BY_NAME[rank.format], "MEMORY_FROM", default)


def with_memory(steps: Iterable[StepRecords], rank: RankInfo, diag: Diagnostics) -> Iterable[StepRecords]:
    """The steps (in time order) with the rank's memory counters and its allocations of
    ``DRAWN_ALLOCATION_BYTES`` and more added, each to the step it falls in (``spill.by_time``). A
    memory file broken beyond recovery is a warning: the rank's other records are drawn."""
    if getattr(BY_NAME[rank.format], "memory", None) is None:
        return steps

    def fill(add) -> None:
        batch: list[Slice | Sample] = []
        try:
            for r in memory(rank, diag):
                if type(r) is Sample or r.layer is not Layer.MEMORY or _size(r) >= DRAWN_ALLOCATION_BYTES:
                    batch.append(r)
                if len(batch) >= 10_000:
                    add(batch)
                    batch = []
        except InputError as e:  # broken memory files cost the trace its memory, not the rank
            diag.warn("bad_memory", f"{e}; rank {rank.rank}'s memory is drawn only up to there")
        add(batch)

    return by_time(steps, rank.rank, fill)


def _size(s: Slice) -> float:
    return s.args.get(MEMORY_SIZE_ARG, 0) if isinstance(s.args, dict) else 0
