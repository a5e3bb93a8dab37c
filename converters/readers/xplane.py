"""JAX / XLA profiler output: an XSpace protobuf (``<host>.xplane.pb``, ``jax.profiler`` and
TensorFlow's profiler), one file per host, one rank per device plane (docs/formats.md, XSpace).

Schema: XLA's ``xplane.proto`` (kept beside this file, compiled into ``xplane_pb2``). An XSpace is
one message whose planes are its top-level fields: ``wire.frames`` walks those fields by their length
prefixes (seeking, never reading a plane it does not need), and a plane is decoded a line at a
time, read 4 MiB at a time (``wire.lines``), so a read holds a piece of a line and 20,000 of its
events decoded at a time; each batch is made into records in C by this module's rules
(``_core.xdevice``, ``xhost``, ``xkernels``, ``xfiled``), which a batch C leaves (an event without
times, past the model's times or without a name) follows here.
A frame that runs past the end of the file is a cut file.

- ``/device:GPU:N``, ``/device:TPU:N``: a rank each. A GPU's ``Stream #S(...)`` lines are device
  lanes (``GPU N Stream S``): kernels compute (``GPU_KERNEL``) unless their name is a
  collective's (``collectives.nccl``, ``collectives.gpu``: a communication op), memcpy and memset
  events are copies (by their own name or stats: a stream runs both); its other lines (XLA's
  derived ``XLA Ops``, ``XLA Modules``, ...) repeat the streams' work and are drawn as no
  computation. A TPU's plane has no stream: its ``XLA Ops`` line holds its ops, typed by their
  HLO opcode (``_xla_op``), and every line is a lane ``TPU N <line>``; a ``Steps`` line gives the
  device's steps where the host gives none. Other planes are said, not read.
- ``/host:CPU``: one host lane per line (thread); an event with a ``correlation_id`` the
  launch of the device event of that id (an arrow between them) and the rank's whose device ran
  it; every other host event (TraceMe ranges, the Python tracer) the first rank's.
- Times: a line's ``timestamp_ns`` plus each event's ``offset_ps``, durations ``duration_ps``, in
  ps. JAX writes them from the capture's start, which the ``Task Environment`` plane gives in
  epoch ns (``profile_start_time``); without that plane they stay the file's own.
- Steps: the user's ranges (``--step-marker``), else the host ranges that carry a ``step_num``
  stat (``jax.profiler.StepTraceAnnotation``), else the device plane's ``Steps`` line, else the
  whole capture as one step; device work is filed under the step its launch lies in.
"""

from __future__ import annotations

import functools
import re
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from ..errors import Diagnostics, InputError
from ..intervals import NOT_COMPUTE, is_compute
from ..model import (
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    BROADCAST,
    COLLECTIVE,
    GPU_KERNEL,
    ID_LIMIT,
    RECV,
    REDUCESCATTER,
    SEND,
    SENDRECV,
    TIME_LIMIT_NS,
    XLA_OP,
    Layer,
    RankInfo,
    Slice,
    Step,
    StepRecords,
    checked_id,
    comm_type,
)
from . import collectives
from . import xplane_wire as wire
from ._core import Launches, xdevice, xevents, xfiled, xhost, xkernels
from .base import Reader
from .common import markers
from .common.args import as_json
from .common.flows import flow_id
from .common.lanes import gpu_stream, tpu_line
from .common.parts import PART_WINDOW_NS
from .common.spill import ByTime, StepSpill

NAME = "xplane"
_FILE = re.compile(r"\.xplane\.pb$")
_DEVICE = re.compile(r"^/device:([A-Z]+):(\d+)$")  # /device:GPU:0, /device:TPU:3 (not /device:CUSTOM:...)
_HOST = "/host:CPU"
_ENVIRONMENT = "Task Environment"
_STREAM = re.compile(r"^Stream #(\d+)")
_INTS = ("int64_value", "uint64_value")  # a key stat's value: an int, else None
# Copies: (task type, the starts of their names, the stat they carry: CUPTI's and ROCm's tracers
# name each copy ``MemcpyH2D``, ``Memset``, ... with ``memcpy_details`` / ``memset_details``);
# ROCm runs copies and fills as blit kernels (``__amd_rocclr_copyBuffer.kd``, xplane-jax-conv)
_COPIES = (("MEMCPY", ("Memcpy", "__amd_rocclr_copy"), "memcpy_details"),
           ("MEMSET", ("Memset", "__amd_rocclr_fill"), "memset_details"))
_NO_DEVICE = "an XSpace with no device plane (/device:GPU:N): nothing to draw for it"
# A device plane's lines by XLA's names (tsl/profiler/utils/xplane_schema.h): a TPU's ops run one
# after another on its core, on ``XLA Ops``, with no ``Stream #`` line (on a GPU, ``XLA Ops``
# repeats its streams' kernels); ``Async XLA Ops`` holds the asynchronous ones in flight (the
# copies a ``copy-start`` issues, to their ``copy-done``); ``Steps`` the device's steps.
_OPS_LINE, _ASYNC_LINE, _STEPS_LINE = "XLA Ops", "Async XLA Ops", "Steps"
_STEP_STATS = ("group_id", "step_num")  # a Steps event's number (its name too: "0", "1", ...)
# XLA's collectives by their HLO opcode (an op's hlo_category or display name, ``all-reduce.1``,
# ``all-gather-start``): the kind the model gives them
_XLA_COLLECTIVES = {"all-reduce": ALLREDUCE, "all-gather": ALLGATHER, "reduce-scatter": REDUCESCATTER,
                    "all-reduce-scatter": REDUCESCATTER,
                    "all-to-all": ALLTOALL, "ragged-all-to-all": ALLTOALL, "collective-permute": SENDRECV,
                    "collective-broadcast": BROADCAST, "send": SEND, "recv": RECV}
# xprof's collectives whose category names no collective opcode (smart_suggestion's IsCollective)
_XLA_CATEGORIES = {"megacore fusion": COLLECTIVE, "host send": SEND, "host send-done": SEND,
                   "host recv": RECV, "host recv-done": RECV}
_XLA_COPIES = frozenset({"copy-start", "copy-done"})  # a DMA issued, and the core waiting for it
# the core waiting on an asynchronous op that says no more of itself: no computation
_XLA_WAITS = frozenset({"async-start", "async-update", "async-done"})
_OPCODE = re.compile(r"^%?([a-z][a-z0-9-]*)")
_XLA_COMM_LANE = "XLA collectives"  # a TPU's collectives' lane (the file names no communicator)
# Planes this reader knows it does not read: the HLO protos (``/host:metadata``) and the capture's
# times (read apart); any other that is no device or host plane is said
_KNOWN = ("/host:metadata", "Task Environment")
_COMM_LANE = "NCCL"  # collective kernels' lane, as Kineto's (the file names no communicator)


def _decoded_events(path: Path, frame: wire.Frame, batch: Any, stat_names: dict[int, str],
                    keys: dict[int, str] | None) -> list[tuple]:
    """A batch of a line's events (their bytes) as ``_by_protobuf`` decodes them, in C where the
    wire holds nothing unusual (``readers/c/xplane.c``): (metadata_id, counted without times,
    offset_ps, duration_ps, stats by name, the event's bytes) each."""
    found = xevents(batch, stat_names, keys)
    return _by_protobuf(path, frame, batch, stat_names, keys) if found is None else found


def _by_protobuf(path: Path, frame: wire.Frame, batch: Any, stat_names: dict[int, str],
                 keys: dict[int, str] | None) -> list[tuple]:
    """The rule: each event decoded by protobuf, its stats by name (``_named_stats``), or with
    ``keys`` only its key stats (by their names in ``keys``: an int, or None for another value)."""
    line = wire.decoded(path, frame, wire.pb().XLine, wire.line_frames()(events=batch).SerializeToString())
    return [(event.metadata_id, event.WhichOneof("data") == "num_occurrences", event.offset_ps,
             event.duration_ps, _named_stats(stat_names, event.stats) if keys is None else
             {keys[s.metadata_id]: getattr(s, kind) if (kind := s.WhichOneof("value")) in _INTS else None
              for s in event.stats if s.metadata_id in keys}, raw)
            for event, raw in zip(line.events, batch, strict=True)]


class _Space(NamedTuple):
    """What a file's small fields say: its planes by name, its host, its capture's start."""

    planes: dict[str, wire.Frame]
    host: str | None
    start_ns: int | None  # Task Environment's profile_start_time (epoch ns)


def _space(path: Path) -> _Space:
    planes: dict[str, wire.Frame] = {}
    host = None
    for frame in wire.frames(path):
        if frame.number == wire.PLANES:
            planes.setdefault(wire.plane_name(path, frame), frame)
        elif frame.number == wire.HOSTNAMES and host is None:
            host = wire.read_frame(path, frame).decode("utf-8", "replace")
    start = None
    if _ENVIRONMENT in planes:
        stats = _stats(wire.plane(path, planes[_ENVIRONMENT]))
        start = stats.get("profile_start_time")
    return _Space(planes, host, start if isinstance(start, int) and start > 0 else None)


def _stats(plane: Any) -> dict[str, Any]:
    """The plane's stats by name, ref values resolved to the names they point at, bytes left out."""
    return _named_stats(_stat_names(plane), plane.stats)


def _stat_names(plane: Any) -> dict[int, str]:
    return {i: m.name for i, m in plane.stat_metadata.items()}


def _named_stats(names: dict[int, str], stats: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stat in stats:
        kind = stat.WhichOneof("value")
        if kind is None or kind == "bytes_value":
            continue
        value = getattr(stat, kind)
        key = names.get(stat.metadata_id)
        out[str(stat.metadata_id) if key is None else key] = (
            names.get(value, value) if kind == "ref_value" else value)
    return out


def sniff(folder: Path) -> bool:
    """A folder holding at least one XSpace file."""
    return any(_FILE.search(p.name) and p.is_file() for p in folder.iterdir())


def rank_infos(folder: Path, diag: Diagnostics | None = None) -> list[RankInfo]:
    """One rank per device plane of each file (a file a host), numbered on from the previous file's
    in name order: a plane's ordinal is its host's own."""
    infos: list[RankInfo] = []
    for path in sorted(p for p in folder.iterdir() if _FILE.search(p.name) and p.is_file()):
        infos += _file_ranks(path, infos[-1].rank + 1 if infos else 0, diag)
    return infos


def lone_file(path: Path, diag: Diagnostics | None) -> list[RankInfo] | None:
    """An XSpace passed alone: its device planes' ranks from 0 (None: not an ``*.xplane.pb``).

    Raises:
        InputError: it holds no device plane (in a folder, a warning: the other files may).
    """
    if not (_FILE.search(path.name) and path.is_file()):
        return None
    infos = _file_ranks(path, 0, diag)
    if not infos:
        raise InputError(path, "", _NO_DEVICE)
    return infos


def _file_ranks(path: Path, base: int, diag: Diagnostics | None) -> list[RankInfo]:
    """One file's ranks, one per device plane by its ordinal, numbered from ``base``."""
    space = _space(path)
    devices = sorted(int(m[2]) for name in space.planes if (m := _DEVICE.match(name)))
    clock = ("line timestamp_ns + offset_ps from the capture's start, Task Environment's "
             "profile_start_time (epoch ns) added" if space.start_ns is not None
             else "line timestamp_ns + offset_ps, the file's own (no Task Environment plane)")
    if space.start_ns is None and devices and diag is not None:  # JAX writes it last: a cut there too
        diag.note("xplane_clock", f"{path}: no Task Environment plane: times are the file's own")
    if not devices and diag is not None:
        diag.warn("xplane_no_device", f"{path}: {_NO_DEVICE}")
    unread = [n for n in space.planes if not (_DEVICE.match(n) or n.startswith("/host:") or n in _KNOWN)]
    if unread and diag is not None:  # a TPU's SparseCore planes, a custom device's: not drawn
        diag.warn("xplane_unread_plane", f"{path}: planes not read (no device or host plane this reader "
                  f"knows): {', '.join(sorted(unread)[:5])}{' ...' if len(unread) > 5 else ''}")
    return [RankInfo(rank=checked_id(base + d), format=NAME, path=path, device=d, host=space.host,
                     start_ns=space.start_ns, clock=clock, source_paths=(path,),
                     clock_offset_ns=space.start_ns or 0, wall_clock=space.start_ns is not None)
            for d in devices]


class _Event(NamedTuple):
    lane: str
    name: str
    start_ns: int
    dur_ns: int
    stats: dict[str, Any]  # all of them, or (``_batches(..., every_stat=False)``) only its key stats
    raw: bytes  # the event's bytes, for all its stats on demand
    metadata_id: int  # its XEventMetadata's, whose stats say what an XLA op is (hlo_category)


_KEY_STATS = ("correlation_id", "step_num")  # what places a host event: its launch, its step
# what types a device event in summary, which draws no args: its launch, its copy stats, its step
_DEVICE_KEYS = (*_KEY_STATS, *(stat for *_, stat in _COPIES), *_STEP_STATS)


class _Plane(NamedTuple):
    """What reading a plane's events takes from its head: its name, its events' names and its
    stats' names by metadata id, and the ids of its key stats by name."""

    name: str
    names: dict[int, str]
    stat_names: dict[int, str]
    keys: dict[int, str]


# a line, its base time (ns), a batch of its events decoded, and whether C decoded them (xevents)
_Batch = tuple[Any, int, list[tuple], bool]


def _batches(path: Path, frame: wire.Frame, offset_ns: int, every_stat: bool = True,
             key_stats: tuple[str, ...] = _KEY_STATS) -> tuple[_Plane, Iterator[_Batch]]:
    """A plane's head and its lines' events, a batch at a time, decoded (without ``every_stat``,
    only their ``key_stats``), each with its line, the line's base time and whether C decoded
    them (else protobuf did: ``_decoded_events``)."""
    plane, lines = wire.layout(path, frame)
    names = {i: m.display_name or m.name for i, m in plane.event_metadata.items()}
    stat_names = _stat_names(plane)
    head = _Plane(plane.name, names, stat_names,
                  {i: name for i, name in stat_names.items() if name in key_stats})

    def batches() -> Iterator[_Batch]:
        for line, batch in wire.lines(path, frame, lines):
            keys = None if every_stat else head.keys
            found = xevents(batch, stat_names, keys)
            decoded = _by_protobuf(path, frame, batch, stat_names, keys) if found is None else found
            yield line, offset_ns + line.timestamp_ns, decoded, found is not None
            del found, decoded  # not held while the next batch is read and decoded (nor below)

    return head, batches()


def _timed(path: Path, plane: _Plane, line: Any, base: int, decoded: list[tuple], diag: Diagnostics,
           every_stat: bool = True,
           named: Callable[[str], bool] | None = None) -> Iterator[tuple[Any, _Event]]:
    """A batch of a line's events, timed and named; aggregated ones (``num_occurrences``, no
    time) counted. Without ``every_stat`` (only their key stats read: a host plane is read by each
    rank of its host, which keeps a few of its events), with ``named`` too, only the events that
    carry a key stat or whose name ``named`` accepts (a rank's read that keeps no other: a tuple
    made for each of the host's events was most of its CPU). The rule ``_core.xdevice`` and
    ``_core.xhost`` follow, where they take a batch."""
    lane = line.display_name or line.name
    for metadata_id, counted, offset_ps, duration_ps, stats, raw in decoded:
        if counted:
            diag.warn("xplane_aggregated", f"{path}: {plane.name} {lane}: events counted without times "
                      "(num_occurrences): not drawn")
            continue
        start, dur = base + offset_ps // 1000, duration_ps // 1000
        if not (-TIME_LIMIT_NS < start < TIME_LIMIT_NS and -TIME_LIMIT_NS < dur < TIME_LIMIT_NS):
            diag.warn("xplane_bad_time", f"{path}: {plane.name} {lane}: events whose times lie past "
                      "±2**62 ns: not drawn")
            continue
        name = plane.names.get(metadata_id)
        if name is None:
            name = f"event {metadata_id}"
        if not every_stat and named is not None and not stats and not named(name):
            continue
        yield line, _Event(lane, name, start, dur, stats, raw, metadata_id)


class _Device(NamedTuple):
    """What types a device plane's events: its kind (``GPU``, ``TPU``), whether its work is on
    ``Stream #`` lines (a GPU's) or on ``XLA Ops`` (a TPU's), and its ops' hlo_category by
    metadata id."""

    kind: str
    streams: bool
    categories: dict[int, str]


def _device(path: Path, frame: wire.Frame, kind: str) -> _Device:
    plane, lines = wire.layout(path, frame)
    names = _stat_names(plane)
    categories = {}
    for i, meta in plane.event_metadata.items():
        found = _named_stats(names, meta.stats).get("hlo_category")
        if isinstance(found, str):
            categories[i] = found
    streams = any(_STREAM.match(wire.line_name(path, line)) for line in lines)
    return _Device(kind, streams, categories)


def _device_slice(rank: RankInfo, plane: _Device, line: Any, event: _Event, detail: bool) -> Slice:
    """A device event in the model's words: a kernel that computes or communicates, or a copy; on
    a plane without streams (a TPU's), the ops of its ``XLA Ops`` line alike (``_xla_op``)."""
    if not plane.streams:
        return _xla_op(rank, plane, line.name, event, detail)
    stream, lane, on_stream = _stream_lane(rank.device, line.name)
    args = _json({"Stream": stream, **event.stats}) if detail else None
    if not on_stream:  # a line of the plane that is no stream
        task_type = NOT_COMPUTE
    else:
        task_type = _copy(event) or GPU_KERNEL
        communicates = _communication(event.name) if task_type is GPU_KERNEL else None
        if communicates is not None:
            return Slice(rank.rank, Layer.COMM_OP, _COMM_LANE, event.name, event.start_ns, event.dur_ns, args,
                         communicates)
    return Slice(rank.rank, Layer.STREAM, lane, event.name, event.start_ns, event.dur_ns, args, task_type)


@functools.lru_cache(maxsize=1024)
def _stream_lane(device: int, line: str) -> tuple[str, str, bool]:
    """A line's stream (its number, else the line's name), its lane, and whether it is a
    ``Stream #`` line: looked up once per line, not per event."""
    stream = _STREAM.match(line)
    text = stream[1] if stream else line
    return text, gpu_stream(device, text), stream is not None


def _xla_op(rank: RankInfo, plane: _Device, line: str, event: _Event, detail: bool) -> Slice:
    """An event of a plane whose ops are on ``XLA Ops`` (a TPU's), by its HLO opcode (its
    hlo_category, else its name): a collective communicates, ``copy-start`` / ``copy-done`` are
    copies (a DMA issued and waited for), a bare ``async-done`` waits (no computation), any other
    op of the line computes (``XLA_OP``); the
    asynchronous ops in flight are copies or no computation, and every other line
    (``XLA Modules``, ``XLA TraceMe``, ``Framework Ops``, ...) is drawn as ranges of no computation."""
    category = plane.categories.get(event.metadata_id)
    args = None
    if detail:
        args = _json({"Line": line, **({"hlo_category": category} if category is not None else {}),
                      **event.stats})
    lane = tpu_line(rank.device, line) if plane.kind == "TPU" else gpu_stream(rank.device, line)
    slice_ = Slice(rank.rank, Layer.STREAM, lane, event.name, event.start_ns, event.dur_ns, args, NOT_COMPUTE)
    if line not in (_OPS_LINE, _ASYNC_LINE):
        return slice_
    opcodes = [found[1] for text in (category, event.name) if text and (found := _OPCODE.match(text))]
    if any(op in _XLA_COPIES for op in opcodes):
        return slice_._replace(task_type="MEMCPY")
    if line == _ASYNC_LINE:
        return slice_
    kind = _XLA_CATEGORIES.get(category or "") or next(
        (_XLA_COLLECTIVES[base] for op in opcodes
         if (base := op.removesuffix("-start").removesuffix("-done")) in _XLA_COLLECTIVES), None)
    if kind is not None:
        return Slice(rank.rank, Layer.COMM_OP, _XLA_COMM_LANE, event.name, event.start_ns, event.dur_ns, args,
                     comm_type(kind))
    if any(op in _XLA_WAITS for op in opcodes):
        return slice_
    return slice_._replace(task_type=XLA_OP)


def _copy(event: _Event) -> str | None:
    """MEMCPY or MEMSET for a copy (by its own name or stats, never its line's: a stream that ran
    kernels and copies is ``Stream #7(Kernel,MemcpyH2D)``), ROCm's blit kernels among them; None
    for a kernel."""
    for kind, words, stat in _COPIES:
        if event.name.startswith(words) or stat in event.stats:
            return kind
    return None


def _correlation(stats: dict[str, Any]) -> int | None:
    found = stats.get("correlation_id")
    return found if isinstance(found, int) else None


def read(rank: RankInfo, diag: Diagnostics, *, detail: bool = True,
         step_marker: str | None = None) -> Iterator[StepRecords]:
    """The rank's device plane and its share of the host planes, step by step: one plane decoded
    at a time (the first rank's read decodes every device plane once more, for their ids alone),
    its records waiting on disk by time until the steps are known (``_Held``), so memory holds a
    batch of events and, per launch, its correlation id's count and time, never the planes."""
    path, space = rank.path, _space(rank.path)
    devices = {int(m[2]): (m[1], frame) for name, frame in space.planes.items() if (m := _DEVICE.match(name))}
    kind, mine = devices[rank.device]
    with _Held(rank.rank) as held:
        plane = _device(path, mine, kind)
        launched, device_steps = _device_work(rank, plane, mine, diag, detail, held.device)
        first = rank.device == min(devices)
        others = [frame for d, (_, frame) in devices.items() if d != rank.device]
        elsewhere = _correlations(path, others, diag) if first else Launches()
        ranges: list[tuple[int, int, Any]] = []  # the steps' ranges: (start, duration, step number or None)
        marker = markers.checked(step_marker)
        for name in (n for n in space.planes if n.startswith("/host:") and n != "/host:metadata"):
            ranges += _host_work(path, space.planes[name], rank, (first, detail, marker), launched, elsewhere,
                                 held.host, diag)
        if marker and not ranges:
            diag.warn(markers.UNMATCHED, f"{path}: no host range named {marker!r}: the whole capture is one "
                      "step", subject=f"rank {rank.rank}")
        steps = _steps(ranges, numbered=marker is not None)
        if not ranges and marker is None and device_steps:  # the device's own (a TPU's Steps line)
            steps = _steps([(s.start_ns, s.dur_ns, n) for s, n in device_steps],
                           numbered=any(n is None for _, n in device_steps))
        elif detail:  # no step here: drawn where they are, as the other lines
            held.device.add([s for s, _ in device_steps])
        yield from held.by_step(steps, launched, arrows=detail)


class DeviceInC(NamedTuple):
    """What ``_core.xdevice`` reads a GPU's stream lines with, by ``_device_slice``'s rules
    (records.h DEVICE_IN_C_*)."""

    rank: int
    detail: bool
    names: dict[int, str]  # _Plane.names
    slice_type: type
    stream_layer: Layer
    comm_layer: Layer
    comm_lane: str
    kernel: str  # a kernel's task type (GPU_KERNEL)
    not_compute: str
    computes: frozenset[str]  # the task types above that compute (is_compute): what a summary keeps
    copies: tuple  # _COPIES
    communicates: dict[str, str | None]  # kernels' names: what they do as a communication op's task type
    learn: Callable[[str], str | None]  # a name not yet in ``communicates``: found, and kept there
    launched: Launches
    dumps: Callable[[Any], bytes]  # orjson's, as common.args.as_json calls it


class HostInC(NamedTuple):
    """What ``_core.xhost`` reads a host plane's lines with, by ``_host_work``'s rules (records.h
    HOST_IN_C_*)."""

    rank: int
    detail: bool
    first: bool  # the first rank of the host: it draws the host events that launch nothing
    names: dict[int, str]  # _Plane.names
    stat_names: dict[int, str]  # _Plane.stat_names: a kept event's args
    slice_type: type
    host_layer: Layer
    launched: Launches  # the rank's own launches
    elsewhere: Launches  # the launches of the host's other devices (the first rank's: not its events)
    marker: str | None  # --step-marker
    id_limit: int  # a step number lies below it (ID_LIMIT)
    dumps: Callable[[Any], bytes]  # orjson's, as common.args.as_json calls it


def _host_work(path: Path, frame: wire.Frame, rank_info: RankInfo, how: tuple[bool, bool, str | None],
               launched: Launches, elsewhere: Launches, held: ByTime,
               diag: Diagnostics) -> list[tuple[int, int, Any]]:
    """A host plane's share of the rank: its launches (their times kept in ``launched``, each with
    an arrow to each kernel of it) and, on the first rank, every event that launches no other
    rank's work, as slices in detail, handed to ``held``; the steps' ranges (start, duration,
    step number or None) returned, drawn as the steps they are on every rank. Read in C
    (``_core.xhost``) by these rules, a batch at a time, where C decoded the batch; a batch it
    leaves (an event without times, past the model's times or without a name) here. ``how``: whether
    the rank is its host's first, whether in detail, and the user's marker."""
    (first, detail, marker), rank = how, rank_info.rank
    head, batches = _batches(path, frame, rank_info.clock_offset_ns, False)
    in_c = HostInC(rank, detail, first, head.names, head.stat_names, Slice, Layer.HOST, launched, elsewhere,
                   marker, ID_LIMIT, orjson.dumps)
    keyed = None if first and detail else functools.partial(_is_marker, marker)  # what it keeps
    host: list[Slice] = []
    ranges: list[tuple[int, int, Any]] = []
    for line, base, decoded, by_c in batches:  # xhost decodes a kept event's args from its bytes, as C does
        found = xhost(decoded, in_c, line.display_name or line.name, base) if by_c else None
        if found is not None:
            host += found[0]
            ranges += found[1]
            decoded = ()
        for _, event in _timed(path, head, line, base, decoded, diag, False, keyed):
            if _marks(marker, event):  # drawn as the step it is, on every rank
                ranges.append((event.start_ns, event.dur_ns, None if marker else event.stats["step_num"]))
                continue
            c = _correlation(event.stats)
            launches = c is not None and launched.launch(c, event.start_ns)  # its time kept
            if not launches and (not first or (c is not None and c in elsewhere)):
                continue
            if not detail:  # host events are drawn in detail only; launches still file their work
                continue
            kernels = launched.count(c) if c is not None else 0  # its arrows: one to each kernel
            flow = tuple(flow_id(rank, f"launch:{c}", k) for k in range(kernels)) if kernels else ()
            args = _decoded_events(path, frame, [event.raw], head.stat_names, None)[0][4]
            host.append(Slice(rank, Layer.HOST, event.lane, event.name, event.start_ns, event.dur_ns,
                              _json(args) if args else None, flows_out=flow))
        held.add(host)
        host, decoded, found = [], (), None
    return ranges


def _device_work(rank: RankInfo, plane: _Device, frame: wire.Frame, diag: Diagnostics, detail: bool,
                 held: ByTime) -> tuple[Launches, list[tuple[Slice, int | None]]]:
    """The rank's device events as slices, handed to ``held`` (in summary, only what computes and
    communicates, as Kineto's), each with its correlation id and place as its ``flows_out`` (``_Held``); the
    kernels of each correlation id counted (a launch may run several); and apart the ranges of its
    ``Steps`` line with their step numbers (None: not said). A GPU's stream lines are read in C
    (``_core.xdevice``) by these rules, a batch at a time; a batch it leaves (an event without
    times, past the model's times or without a name) and every other line here."""
    launched = Launches()
    head, batches = _batches(rank.path, frame, rank.clock_offset_ns, detail, _DEVICE_KEYS)
    in_c = DeviceInC(rank.rank, detail, head.names, Slice, Layer.STREAM, Layer.COMM_OP, _COMM_LANE,
                     GPU_KERNEL, NOT_COMPUTE, _COMPUTES, _COPIES, {}, _communication, launched, orjson.dumps)
    work, steps = [], []
    for line, base, decoded, _ in batches:
        if plane.streams and line.name != _STEPS_LINE:
            stream, lane, on_stream = _stream_lane(rank.device, line.name)
            made = xdevice(decoded, in_c, lane, stream, on_stream, base)
            if made is not None:
                work += made
                decoded = ()
        for _, event in _timed(rank.path, head, line, base, decoded, diag, detail):
            made = _device_slice(rank, plane, line, event, detail)
            if line.name == _STEPS_LINE:
                steps.append((made, _step_number(event)))
            elif detail or made.layer is Layer.COMM_OP or is_compute(made.task_type):
                c = _correlation(event.stats)
                if c is not None:  # the k-th kernel of a launch, which ends its k-th arrow
                    made = made.with_flows((c, launched.kernel(c)), ())
                work.append(made)
        held.add(work)  # a batch at a time: what memory holds is one batch's records
        work, decoded, made = [], (), None
    return launched, steps


_COMPUTES = frozenset(t for t in (GPU_KERNEL, "MEMCPY", "MEMSET", NOT_COMPUTE) if is_compute(t))


def _communication(name: str) -> str | None:
    """A kernel's task type as a communication op (``collectives.nccl``, ``collectives.gpu``), or
    None: it computes."""
    kind = collectives.nccl(name) or collectives.gpu(name)
    return None if kind is None else comm_type(kind)


def _step_number(event: _Event) -> int | None:
    """A ``Steps`` event's step: its ``group_id`` (``step_num``) stat, else its name (``"3"``)."""
    for key in _STEP_STATS:
        found = event.stats.get(key)
        if isinstance(found, int) and 0 <= found < ID_LIMIT:
            return found
    return int(event.name) if event.name.isdigit() and int(event.name) < ID_LIMIT else None


def _marks(marker: str | None, event: _Event) -> bool:
    """A step's range: the user's marker, else (no marker) JAX's StepTraceAnnotation (``step_num``)."""
    if marker is None:
        number = event.stats.get("step_num")
        return isinstance(number, int) and 0 <= number < ID_LIMIT
    return _is_marker(marker, event.name)


def _is_marker(marker: str | None, name: str) -> bool:
    """The name is the user's marker's (none without a marker: ``step_num`` marks JAX's steps)."""
    if marker is None:
        return False
    return name.startswith(marker[:-1]) if marker.endswith("*") else name == marker


def _steps(ranges: list[tuple[int, int, Any]], numbered: bool) -> list[Step]:
    """The ranges as steps: ``numbered`` 1, 2, ... in time order (a marker's: nested ones no step),
    else by their own numbers (one range a step)."""
    if numbered:
        return [Step(None, i, start, start + dur) for i, (start, dur) in
                enumerate(markers.numbered([(s, d) for s, d, _ in ranges]), 1)]
    by_number: dict[int, Step] = {}
    for start, dur, number in sorted(ranges):
        by_number.setdefault(number, Step(None, number, start, start + dur))  # one range a step
    return sorted(by_number.values(), key=lambda s: s.start_ns)


class _Held:
    """A rank's records on disk until its steps are known: its device work and its host ranges
    by time (``ByTime``), then filed under their steps. A device slice waits with its correlation
    id and its place among its launch's kernels as its ``flows_out`` (device work starts no arrow),
    which filing turns into the end of its launch's arrow."""

    def __init__(self, rank: int) -> None:
        self._rank = rank

    def __enter__(self) -> _Held:
        self._spills = [StepSpill().__enter__() for _ in range(3)]
        self.device, self.host = (ByTime(spill, self._rank, PART_WINDOW_NS) for spill in self._spills[:2])
        return self

    def __exit__(self, *_: object) -> None:
        for spill in self._spills:
            spill.__exit__()

    def by_step(self, steps: list[Step], launched: Launches, *, arrows: bool) -> Iterator[StepRecords]:
        """The records filed under the last step started at or before them (device work at its
        launch, where the host plane holds it: a GPU runs behind its host), those before the first
        step in a pseudo step of their own; with ``arrows`` (detail), one where both ends are read.
        A step's host records come before its device work, each by time window (``ByTime``)."""
        rank, starts, filed = self._rank, array("q", [step.start_ns for step in steps]), self._spills[2]
        for records in self.host.take_before(None):
            for index, group in xfiled(records, starts, None, rank, arrows).items():  # in C: _filed
                filed.add(("host", index), group)
        for records in self.device.take_before(None):
            for index, group in xfiled(records, starts, launched, rank, arrows).items():
                filed.add(("device", index), group)
        for index in range(len(steps) + 1):
            slices = [*filed.load(("host", index), rank), *filed.load(("device", index), rank)]
            if index == 0:
                if slices or not steps:
                    yield StepRecords(rank, None, None, None, slices)
                continue
            step = steps[index - 1]
            slices.append(Slice(rank, Layer.STEP, "Steps", f"Step {step.step}", step.start_ns,
                                step.end_ns - step.start_ns, {"Step": step.step}))
            yield StepRecords(rank, None, step.step, step, slices)


def _json(args: dict[str, Any]) -> bytes | dict[str, Any]:
    """Args as the JSON text the model takes (``common.args``), which the spill packs in C (a dict
    it writes by marshal, 5x slower); as they are where JSON cannot hold them (an int past 64 bits)."""
    try:
        return as_json(args)
    except TypeError:
        return args


def _filed(records: list[Slice], starts: list[int], launched: Launches | None, rank: int,
           arrows: bool) -> dict[int, list[Slice]]:
    """The rule ``_core.xfiled`` follows: ``records`` by the index of the last step started at or
    before them (``bisect_right`` of ``starts``), in their order: host records by their start;
    device work (``launched`` given) by its launch's time where the host plane holds it, its
    ``flows_out`` (correlation id, place) made into the end of its launch's arrow (``arrows``)."""
    groups: dict[int, list[Slice]] = {}
    for s in records:
        at = None
        if launched is not None:
            c, k = s.flows_out or (None, 0)
            at = launched.launched_at(c) if c is not None else None
            s = s.with_flows((), (flow_id(rank, f"launch:{c}", k),) if arrows and at is not None else ())
        groups.setdefault(bisect_right(starts, s.start_ns if at is None else at), []).append(s)
    return groups


def _correlations(path: Path, frames: list[wire.Frame], diag: Diagnostics) -> Launches:
    """The correlation ids of these device planes' events: the launches of their ranks."""
    found = Launches()
    for frame in frames:
        head, batches = _batches(path, frame, 0, False)
        for line, base, decoded, _ in batches:
            if xkernels(decoded, head.names, base, found):  # in C, by this rule
                continue
            for _, event in _timed(path, head, line, base, decoded, diag, False):
                if (c := _correlation(event.stats)) is not None:
                    found.kernel(c)
    return found


READER = Reader(
    name=NAME,
    folder="JAX / XLA profiler files *.xplane.pb (XSpace protobuf)",
    sniff=sniff, rank_infos=rank_infos, read=read,
    lone_files=("a JAX profiler *.xplane.pb",), lone_file=lone_file,
    files=True,  # reads the files of a folder, not the folder: its subfolders are walked on
    step_marker=True,  # ``read`` takes the user's annotation as the step (--step-marker)
)
