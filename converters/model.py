"""The small model between readers and writers.

Every time is an integer count of nanoseconds since the Unix epoch (``*_ns``), converted once
at the reader boundary. Float microseconds at epoch scale have a grain of ~0.25 µs and misorder
back-to-back tasks, so they never cross this boundary. Nor does a time past ±2**62 ns (the year
2116) or a duration past 2**62 ns: every reader checks each time it makes (``checked_ns``, after
the rank's clock offset), so a start and its duration add up within the int64 of the C loops and
the encoders; a rank's own numbers are checked as its ``RankInfo`` is made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from operator import attrgetter
from pathlib import Path
from typing import Any, NamedTuple

from .errors import InputError, as_text
from .intervals import StepIntervals

TIME_LIMIT_NS = 1 << 62  # the year 2116
ID_LIMIT = 1 << 31  # ranks, devices, graphs and steps: a count, never a time


def decoded_args(raw: bytes) -> Any:
    """A slice's raw args decoded. The file's own text: a number a double cannot hold (``1e400``,
    which msgspec refuses where orjson and Perfetto's JSON importer take it as infinite) is
    ±inf, as they read it."""
    return _decode(raw)


def _decode(raw: bytes) -> Any:
    """``decoded_args``'s first call: msgspec is imported here, not with the model (``info``
    decodes no args and, on a MindSpore 1.x profile, loads no msgspec), and its decoder takes over."""
    global _decode
    import msgspec

    decoder, past_doubles = msgspec.json.Decoder(), msgspec.json.Decoder(float_hook=float)

    def decode(raw: bytes) -> Any:
        try:
            return decoder.decode(raw)
        except msgspec.ValidationError:
            return past_doubles.decode(raw)

    _decode = decode
    return decode(raw)


def checked_ns(ns: int) -> int:
    """``ns`` if the model can hold it as a time or duration: within ±2**62 ns.

    Raises:
        ValueError: it is past that (a reader then leaves its record out, with a warning).
    """
    if -TIME_LIMIT_NS < ns < TIME_LIMIT_NS:
        return ns
    raise ValueError(f"{ns} ns is past ±2**62 ns (the year 2116)")


def checked_id(value: int) -> int:
    """``value`` if it can be a rank, device, graph or step number: within ±2**31.

    Raises:
        ValueError: it is past that.
    """
    if -ID_LIMIT < value < ID_LIMIT:
        return value
    raise ValueError(f"{value} is past ±2**31")


class Layer(str, Enum):
    """What a slice describes, in drawing order (``layout.GROUPS`` names each one's track group)."""

    STEP = "Step Trace"
    OVERLAP = "Overlap Analysis"
    STREAM = "Ascend Hardware"  # lanes: "Stream N"
    COMM_OP = "Communication"  # lanes: communication groups ("Group 0 Communication", ...)
    COMM_TASK = "HCCL"  # lanes: "Plane N"
    HOST = "Host"  # lanes: host threads
    MEMORY = "Memory"  # lanes: "<component> allocations" (memory_lane); drawn in detail only

    @property
    def order(self) -> int:
        return _LAYER_ORDER[self]

    @property
    def is_summary(self) -> bool:
        """Summary output (``--kind summary``) holds only these layers."""
        return self in (Layer.STEP, Layer.OVERLAP)


_LAYER_ORDER = {layer: i for i, layer in enumerate(Layer)}
SUMMARY_LAYERS = frozenset(layer for layer in Layer if layer.is_summary)


class Slice(NamedTuple):
    """One interval on one lane of one rank: a device task, an HCCL op or task, a step phase.

    Which graph and step it belongs to is said once by the ``StepRecords`` that holds it.
    ``task_type`` is the device task's type (``AI_CORE``, ``NOTIFY_WAIT``, ``GPU_KERNEL``, ...) where
    there is one; a communication op's is what it does (``comm_type``). ``args`` is a dict, or the
    raw JSON text of one, decoded only if it is written.
    A NamedTuple rather than a dataclass: millions are made per conversion, 3x faster.
    """

    rank: int
    layer: Layer
    lane: str
    name: str
    start_ns: int
    dur_ns: int
    args: dict[str, Any] | bytes | None = None
    task_type: str = ""
    flows_out: tuple[int, ...] = ()  # arrows that start here (e.g. a host launch) ...
    flows_in: tuple[int, ...] = ()  # ... and end here (the device task it launched)

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns

    def with_flows(self, flows_out: tuple[int, ...], flows_in: tuple[int, ...]) -> Slice:
        """This slice with these arrows (5x faster than ``_replace``: it runs per arrow end)."""
        return tuple.__new__(Slice, (*self[:SLICE_FLOWS_OUT], flows_out, flows_in))


# Where a Slice's fields lie, for the copies that change a few of them per slice, where ``_replace``
# is slow: ``Slice(*s[:SLICE_ARGS], args, ...)`` keeps the fields before ``args``. C reads them all by
# position: records.h names them, and tests/test_records_abi.py pins it to ``Slice._fields``.
SLICE_START_NS = Slice._fields.index("start_ns")
SLICE_ARGS = Slice._fields.index("args")
SLICE_FLOWS_OUT = Slice._fields.index("flows_out")


# What a communication op (a ``Layer.COMM_OP`` slice) does, in the model's words: its ``task_type``,
# set by the reader that knows the format (from the op's name where that is all the input says,
# from the launching framework op where the trace records one). The analyses read these and never
# a vendor's names. An op whose reader knows nothing of what it does has ``COLLECTIVE``.
ALLREDUCE = "allreduce"
ALLGATHER = "allgather"
REDUCESCATTER = "reducescatter"
BROADCAST = "broadcast"
REDUCE = "reduce"
ALLTOALL = "alltoall"
BARRIER = "barrier"
GATHER = "gather"
SCATTER = "scatter"
COLLECTIVE = "collective"  # a collective of a type the input does not say
SEND = "send"
RECV = "recv"
SENDRECV = "sendrecv"  # sends and receives with peers in one op (HCCL's batchSendRecv)
POINT_TO_POINT = frozenset({SEND, RECV, SENDRECV})
COMM_KINDS = frozenset({ALLREDUCE, ALLGATHER, REDUCESCATTER, BROADCAST, REDUCE, ALLTOALL, BARRIER, GATHER,
                        SCATTER, COLLECTIVE}) | POINT_TO_POINT
# Where the input says them, a communication op's args carry which instance of its group's
# collectives it is, under these keys (the analyses match ops across ranks by them first):
COMM_GROUP_ARG = "Process Group Name"  # the communicator as every rank of it names it
COMM_SEQ_ARG = "Seq"  # the op's sequence number on its communicator
# A communicator named by the hash its ops' names carry (HCCL's group tag): the same in every rank of
# one run, another in each run (``diff`` compares such groups by their place in the job).
HASHED_GROUP = "hccl group "
# Where the op's name, not its args, says its communicator (HCCL's group tag), the reader puts it in
# the task_type after the kind (``comm_type``): args are written out as the input gave them.
_IN_GROUP = " in "


def comm_type(kind: str, group: str | None = None) -> str:
    """A communication op's ``task_type``: what it does (one of ``COMM_KINDS``) and, where its
    reader knows it from the op's name, the communicator as every rank of it names it."""
    return f"{kind}{_IN_GROUP}{group}" if group else kind


def comm_kind(op: Slice) -> str:
    """What a communication op does (``COMM_KINDS``); ``COLLECTIVE`` where its reader does not say."""
    kind = op.task_type.partition(_IN_GROUP)[0]
    return kind if kind in COMM_KINDS else COLLECTIVE


def comm_group(op: Slice) -> str | None:
    """The communicator a communication op's reader found in its name (``comm_type``); else None."""
    return op.task_type.partition(_IN_GROUP)[2] or None


# The task type of a GPU kernel (``Layer.STREAM``), as the readers of GPU traces set it: it computes.
GPU_KERNEL = "GPU kernel"
# The task type of an XLA op that a TPU's core ran (its ``XLA Ops`` line, readers/xplane.py): it
# computes, as a kernel does (no GPU's: ``ops`` shows it as its own core type)
XLA_OP = "XLA op"
NAMED_BY_KERNEL = frozenset({GPU_KERNEL, XLA_OP})  # device ops whose name is their type (``ops``)


# The task type of a host range that is an operator (Paddle's Operator events): what the operator
# statistics count where a rank ran no device work (``analyses.ops``); drawn as any host range.
HOST_OPERATOR = "Operator"
HOST_MEMORY = "Host memory"  # the counter of a rank's host memory (bytes), drawn in the Host group
MINDDATA = "MindData"  # the group of a rank's data-preparation counters (readers/minddata.py)
_MINDDATA_SEPARATOR = ": "


def minddata_lane(subject: str, metric: str) -> str:
    """The counter of one MindData figure: ``Data queue: size``, ``Op 1 MapOp: workers``,
    ``Machine CPU: user %``; the report reads them back with ``minddata_figure``."""
    return f"{MINDDATA}/{subject}{_MINDDATA_SEPARATOR}{metric}"


def minddata_figure(lane: str) -> tuple[str, str] | None:
    """(subject, metric) of a MindData counter's lane; None for any other counter."""
    if not lane.startswith(MINDDATA + "/"):
        return None
    subject, _, metric = lane[len(MINDDATA) + 1:].rpartition(_MINDDATA_SEPARATOR)
    return subject, metric

# Device memory as the profiler's allocators record it: per component (PTA, GE, PTA+GE, APP, ...: as
# the profiler names them) a counter per kind, in bytes, and each allocation a slice on the
# component's allocations lane (Layer.MEMORY) from its allocation to its release, its size in args.
MEMORY_KINDS = ("Allocated", "Reserved", "Active")
MEMORY_SIZE_ARG = "Size(B)"  # an allocation slice's size; "Released": False where the profile never saw
# its release (it then lasts to the profile's last memory record), RELEASE_NOT_RECORDED where it did not
# record the release but the address was allocated again (it lasts to then; its release time unknown)
RELEASE_NOT_RECORDED = "not recorded"
_MEMORY_COUNTER = re.compile(r"^Memory (.+) \[(Allocated|Reserved|Active)\]$")


def memory_counter(component: str, kind: str) -> str:
    """The counter lane of one component's memory of one kind: ``Memory PTA [Allocated]``."""
    return f"Memory {component} [{kind}]"


def memory_counter_of(lane: str) -> tuple[str, str] | None:
    """(component, kind) of a ``memory_counter`` lane; None for any other counter."""
    found = _MEMORY_COUNTER.match(lane)
    return (found[1], found[2]) if found else None


def allocations_lane(component: str) -> str:
    """The lane of one component's allocations: ``PTA allocations``."""
    return f"{component}{_ALLOCATIONS}"


def component_of(lane: str) -> str:
    """The component whose allocations an ``allocations_lane`` holds."""
    return lane.removesuffix(_ALLOCATIONS)


_ALLOCATIONS = " allocations"


class Sample(NamedTuple):
    """One value of a counter (HBM bandwidth, AI Core frequency, memory) at ``start_ns``."""

    rank: int
    lane: str  # the counter's name, e.g. "HBM 0/Read [Read(MB/s)]"
    start_ns: int
    value: float


class FlowEnd(NamedTuple):
    """One end of a flow arrow as a reader finds it: which lane, when, and which flow.

    It binds to the innermost slice of its lane that holds ``start_ns``; a flow whose ends bind
    within one step becomes ``flows_out``/``flows_in`` of those slices.
    """

    rank: int
    layer: Layer
    lane: str
    start_ns: int
    key: str  # category and id, e.g. "HostToDevice:936"
    starts: bool  # True for the start of the arrow, False for its end


@dataclass(frozen=True, slots=True)
class Step:
    """One iteration of one graph on one rank, as the step trace bounds it."""

    graph: int | None
    step: int
    start_ns: int
    end_ns: int
    host_start: bool = True  # starts where the host began it (ProfilerStep#N, STEP_TIME, the step
    # trace), so Preparing (to the first device task) is known; False: bounds taken from the tasks


class StepFigures(NamedTuple):
    """One step's overlap figures as the profiler's own analysis gives them (torch_npu's
    ``step_trace_time.csv``), in ns; None where it gives none. Where a rank has only that analysis
    left, they stand for the step's records, which hold neither its bounds nor its device tasks."""

    computing_ns: int | None
    not_overlapped_ns: int | None
    overlapped_ns: int | None
    communication_ns: int | None
    free_ns: int | None
    stage_ns: int | None  # the step's device span minus Bubble
    bubble_ns: int | None  # time in receive ops
    not_overlapped_excluding_receive_ns: int | None
    preparing_ns: int | None  # from the host's step start to the first device work

    @property
    def step_ns(self) -> int | None:
        """From the host's step start (without Preparing: the first device work) to the device's
        last work: Preparing + Stage + Bubble."""
        if self.stage_ns is None:
            return None
        return (self.preparing_ns or 0) + self.stage_ns + (self.bubble_ns or 0)


class StepKey(NamedTuple):
    """One step of the job, the same on every rank of it: which graph (by the order in which the
    rank's graphs began to run; a graph that numbers its steps anew, a second loop, counts again)
    and which step of it (the profiler's step or iteration id). ``profile.keyed`` gives them.

    Not the graph id: ranks of one job number their graphs differently (msprof-2rank: model 2 on
    rank 0 is model 0 on rank 1), while every rank runs the job's graphs in the same order. Not the
    step id alone: CANN numbers iterations per graph, so two graphs both have a step 1. And not the
    k-th step in time, nor steps overlapping in time: a rank whose profile starts at another
    iteration would pair the wrong steps, and ranks on their own clocks (or on hosts whose clocks
    differ by more than a short step) have no common time; the step ids a framework counts are the
    same on every rank.
    """

    graph: int  # 0: the rank's first graph to run (or its only one, or none), 1: the next, ...
    step: int

    @property
    def text(self) -> str:
        """The step id, with the graph's place where it is not the first (``1``, ``1:3``)."""
        return str(self.step) if self.graph == 0 else f"{self.graph}:{self.step}"


@dataclass(slots=True)
class StepRecords:
    """Everything one rank recorded during one step: the unit readers yield and the cap keeps.

    ``step`` is None for activity no step trace bounds (a rank without step trace is one
    pseudo step). Slices are in no particular order.
    """

    rank: int
    graph: int | None
    step_id: int | None
    step: Step | None
    slices: list[Slice]
    samples: list[Sample] = field(default_factory=list)
    # False: the input records no device tasks for this step (a step-trace-only legacy folder, a
    # host-only trace, a device timeline that ends before the step trace does), so Computing,
    # Free and the not-overlapped split are unknown, not zero.
    has_device: bool = True
    # Where Free is measured, if the profiler measures it over more than the compute and
    # communication (CANN's msprof database: from the first to the last device task of any type).
    device_span: tuple[int, int] | None = None
    # True: the input records its communication ops (a database's COMMUNICATION_OP, even empty),
    # so HCCL plane tasks never stand in for them in the overlap analysis.
    ops_recorded: bool = False
    # The profiler's own figures of the step, where they stand for its records (a rank with only the
    # profiler's analysis files): the overlap report takes them as they are.
    figures: StepFigures | None = None
    # The step as the whole job names it (None: the pseudo step); given by profile.read_profile.
    key: StepKey | None = None
    # Its compute and communication within the time it owns, with what earlier steps' ran on into
    # it: given by profile.read_profile (profile.carried_on), which reads the steps in order.
    intervals: StepIntervals | None = None
    # A pseudo step too big to hold at once comes in parts, in time order (``PART_RECORDS`` each,
    # readers.common.parts): (its number from 0, the start of the next part; None on the last).
    # profile.carried_on cuts each part's intervals by the next one's start and carries the rest
    # on, so the parts' figures add up to the whole step's (profile.folded).
    part: tuple[int, int | None] | None = None

    @property
    def start_ns(self) -> int:
        if self.step is not None:
            return self.step.start_ns
        return min(map(_START, self.slices), default=0)


@dataclass(slots=True)
class RankInfo:
    """What discovery learns about one rank before any record is read."""

    rank: int
    format: str
    path: Path
    device: int | None = None
    host: str | None = None
    device_name: str | None = None  # the device's model where the profile names it ("NVIDIA H100 ...")
    graphs: tuple[int, ...] = ()
    start_ns: int | None = None  # earliest time the profile can hold (collection start)
    clock: str = ""  # how times were converted to epoch, for the rank's description
    source_paths: tuple[Path, ...] = field(default_factory=tuple)  # input files or their folders
    clock_offset_ns: int = 0  # added to the file's own time (in ns) to get epoch ns
    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)  # communication group: ranks
    wall_clock: bool = True  # False: the rank's own timebase, not aligned with other ranks
    host_paths: tuple[Path, ...] = ()  # host_info files of this rank, read with its steps in detail
    side: str = ""  # drawn beside another run (diff -o): which ("BASE", "NEW"), named in its title
    rank_offset: int = 0  # and what was added to its rank so the runs' processes do not collide
    process: int | None = None  # the OS process read, of a file holding several (nsys: its globalPid)

    def __post_init__(self) -> None:
        """Its numbers within the model's bounds (ids below 2**31, times within ±2**62 ns), and its
        host name text any output can carry (it may come from a folder's name).

        Raises:
            InputError: a number past those bounds, or a host name that is no text.
        """
        try:
            for value in (self.rank, self.device, *self.graphs):
                if value is not None:
                    checked_id(value)
            for value in (self.start_ns, self.clock_offset_ns):
                if value is not None:
                    checked_ns(value)
        except ValueError as e:
            raise InputError(self.path, "", f"{str(e)[:80]}: no rank, device, graph or clock a profiler "
                             "writes") from None
        if self.host is not None:
            if not isinstance(self.host, str):
                raise InputError(self.path, "", f"expected a host name, got {self.host!r:.40}")
            self.host = as_text(self.host)

    @property
    def description(self) -> str:
        """Where the rank came from and how its times were read, for the rank's process."""
        text = f"{self.format} profile {as_text(self.path)}; times: {self.clock}"
        if self.host_paths:
            text += f"; host activity: {as_text(self.host_paths[0].parent)}"
        if self.groups:
            text += "; groups: " + ", ".join(f"{name} {list(ranks)}" for name, ranks in self.groups.items())
        return text

    @property
    def title(self) -> str:
        """The process name shown for this rank: ``Rank 0 (device 0, host A2007104679)``."""
        extra = [f"device {self.device}"] if self.device is not None else []
        if self.host:
            extra.append(f"host {self.host}")
        name = f"{self.side} rank {self.rank - self.rank_offset}" if self.side else f"Rank {self.rank}"
        return name + (f" ({', '.join(extra)})" if extra else "")


def step_label(graph: int | None, step: int) -> str:
    """How a step is named on a merged lane and in messages: ``Graph 2 Step 5``."""
    return f"Step {step}" if graph is None else f"Graph {graph} Step {step}"


_START = attrgetter("start_ns")  # a record's start, read without a Python call each
