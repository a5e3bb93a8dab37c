"""Paddle's profiler: ``*.paddle_trace.json`` (``export_chrome_tracing``) and ``*.paddle_trace.pb``
(``export_protobuf``), one file per process, any number in a folder (docs/formats.md §8).

Both forms are read by ``chrome_trace`` with the ``Paddle`` dialect: the protobuf's nodes are made
into the events the JSON export would hold (``_pb_events``), so both draw the same.
- The JSON form ends every name with its duration (``matmul dygraph[12.3 us]``): stripped. Its
  ``ts`` is epoch µs cut to whole µs, but ``args.start_time`` holds each event's start from the
  profiler's start, to the ns where float32 keeps it (the first ~8 ms): times are taken from it
  where it agrees with ``ts``, plus an offset found from the first events (``_base_ns``), so
  nesting is exact; else from ``ts``. The protobuf form holds epoch ns.
- ``tid`` is a string: ``"123(Python)"`` for Python-side ranges, ``"123(C++)"`` for operators: two
  lanes of one OS thread, named by ``thread_name`` as in the file.
- Steps are ``ProfileStep#N``; the phases Paddle marks (Dataloader, Forward, Backward,
  Optimization), at any depth below the step (inside user ranges too), are drawn on lanes of those
  names beside the steps, in summary too; a phase inside another one on that one's lane, as
  Paddle's summary counts it.
- Device events (Kernel, Memcpy, Memset) go on one lane per GPU stream; NCCL kernels and
  Paddle's Communication events are communication ops; CUDA runtime calls link to their kernels
  by correlation id.
- Ranks: from the worker name in the file name (``rank3``, ``worker_3``, ``trainer_3``); where
  nothing says, one rank per file in name order, with a note.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

import msgspec

from ..errors import Diagnostics, InputError
from ..intervals import NOT_COMPUTE
from ..model import COLLECTIVE, GPU_KERNEL, HOST_OPERATOR, Layer, RankInfo, Slice, StepRecords, comm_type
from . import chrome_trace, collectives
from ._core import RawEvents, normalise
from .base import Reader
from .chrome_trace import Converted, Dialect
from .common import jsonfile
from .common.events import FLOATS_AS_TEXT, Event
from .common.events import batches as event_batches
from .common.lanes import gpu_stream
from .common.times import us_to_ns

NAME = "paddle"
_FILE = re.compile(r"\.paddle_trace\.(json|pb)$")
_RANK = re.compile(r"(?:rank|worker|trainer)[_-]?(\d+)", re.IGNORECASE)
_HOST = re.compile(r"^host_(.*?)pid_\d+")
_SUFFIX = re.compile(r"\[\d+(?:\.\d+)? (?:ns|us|ms|s)\]$")  # the duration Paddle adds to every name
_PHASES = ("Dataloader", "Forward", "Backward", "Optimization")
_OPERATOR = "Operator"  # an operator, as Paddle's operator summary counts them (not its inner parts)
_DEVICE_CATS = {"Kernel": "KERNEL", "Memcpy": "MEMCPY", "Memset": "MEMSET"}
_PROBE_BYTES = 1 << 16
_GPU = "GPU stream"  # a route of the dialect's own
_SLACK_NS = 10  # float32 rounding, and the error of the zero found from the first events
_FLOWS = "launch flow ends, drawn from the correlation ids of runtime calls and device work they repeat"


def sniff(folder: Path) -> bool:
    """A folder holding at least one Paddle profiler file."""
    return any(_FILE.search(p.name) and p.is_file() for p in folder.iterdir())


def lone_file(path: Path, diag: Diagnostics | None) -> RankInfo | None:
    """A Paddle profiler file read alone (None if ``path`` is none, by its name)."""
    return rank_info(path) if _FILE.search(path.name) else None


def rank_infos(folder: Path, diag: Diagnostics | None = None) -> list[RankInfo]:
    """One rank per file: its rank from the worker name, else the next free one in name order."""
    paths = sorted(p for p in folder.iterdir() if _FILE.search(p.name) and p.is_file())
    infos = [rank_info(p) for p in paths]
    unranked = [info for info in infos if _RANK.search(info.path.name) is None]
    taken = {info.rank for info in infos if info not in unranked}
    free = (r for r in range(len(infos) + len(taken) + 1) if r not in taken)
    for info in unranked:
        info.rank = next(free)
    if unranked and diag is not None and len(infos) > 1:
        diag.note("paddle_rank", f"{folder}: {len(unranked)} Paddle files whose names say no rank; taken as "
                  "ranks " + ", ".join(f"{i.rank} ({i.path.name})" for i in unranked) + " in name order")
    return infos


def rank_info(path: Path) -> RankInfo:
    """A file's rank (0 where its name says none), host and clock."""
    found = _RANK.search(path.name)
    host = _HOST.match(path.name)
    protobuf = path.suffix == ".pb"
    start, offset = (_pb_start_ns(path), 0) if protobuf else _base_ns(path)
    return RankInfo(
        rank=int(found[1]) if found else 0,
        format=NAME,
        path=path,
        host=host[1] if host and host[1] else None,
        start_ns=start,
        clock="epoch ns" if protobuf else "epoch µs (start_time args to the ns)",
        source_paths=(path,),
        clock_offset_ns=offset,
    )


def read(rank: RankInfo, diag: Diagnostics, *, detail: bool = True) -> Iterator[StepRecords]:
    """Yield the rank's records one step at a time, steps in time order."""
    path = rank.source_paths[0]
    dialect = PaddleProtobuf(0) if path.suffix == ".pb" else Paddle(rank.clock_offset_ns)
    for step in chrome_trace.read_merged(rank, [path], diag, detail, dialect):
        _phases_in_phases(step.slices)
        yield step


def _phases_in_phases(slices: list[Slice]) -> None:
    """A phase inside another phase goes on that one's lane (in place): Paddle's summary counts the
    first phase on each path down from the step, at any depth, so a forward run again inside the
    backward (``fleet.utils.recompute``) is backward time, and a lane's union is Paddle's total.
    Nesting is by time, as Paddle nests a thread's events (its phases are the training thread's)."""
    phases = sorted((i for i, s in enumerate(slices) if s.layer is Layer.STEP and s.lane in _PHASES),
                    key=lambda i: (slices[i].start_ns, -slices[i].dur_ns))
    outer_end, outer_lane = None, ""
    for i in phases:
        s = slices[i]
        if outer_end is not None and s.end_ns <= outer_end:
            if s.lane != outer_lane:
                slices[i] = s._replace(lane=outer_lane)
        else:
            outer_end, outer_lane = s.end_ns, s.lane


# -- the JSON form ------------------------------------------------------------------------------

class _Span(msgspec.Struct):
    start_time: Any = None


_SPAN = msgspec.json.Decoder(_Span)


def _base_ns(path: Path) -> tuple[int | None, int]:
    """(the file's first time, the epoch ns of its ``start_time`` zero). Each ``ts`` is that zero
    plus ``start_time``, cut to the µs: the largest ``ts`` less ``start_time`` among the first
    events is the zero to within a few ns (of events within float32's exact ~8 ms of it: Paddle
    writes the runtime calls made after the last step first)."""
    data = jsonfile.first_bytes(path, _PROBE_BYTES)
    best = None
    for match in _TS_AND_START.finditer(data):
        ts, start = _us_text_to_ns(match["ts"].decode()), _us_text_to_ns(match["start"].decode())
        if ts is not None and start is not None and start < _EXACT_NS and (best is None or ts - start > best):
            best = ts - start
    return best, best or 0


_EXACT_NS = 8_000_000  # float32 µs keep 3 decimals up to 8192 µs


_TS_AND_START = re.compile(rb'"ts":\s*(?P<ts>\d+),[^{}]*\{\s*"start_time":\s*"(?P<start>[\d.]+) us"')


def _us_text_to_ns(text: str) -> int | None:
    try:
        return us_to_ns(text)
    except (ValueError, ArithmeticError):
        return None


class Paddle(Dialect):
    """Paddle's Chrome traces: names without their durations, exact times from ``start_time``."""

    events = msgspec.json.Decoder(list[Event], float_hook=str)
    python_cats = frozenset({"ProfileStep", *_PHASES, *_DEVICE_CATS, "CudaRuntime", "Communication", "async"})
    # an operator's task type marks it for the operator statistics (never drawn): in C, by its category
    host_tasks = MappingProxyType({_OPERATOR: HOST_OPERATOR})
    by_design = frozenset({_FLOWS})
    flow_events = False  # its arrows are its launches' and device work's correlation ids

    def __init__(self, base_ns: int) -> None:
        self.base_ns = base_ns  # the epoch ns of start_time zero: the rank's clock offset

    def batches(self, path: Path, diag: Diagnostics) -> Iterator[list[Event]]:
        for batch in super().batches(path, diag):
            normalise(batch, self.base_ns, self._normalise)  # in C where the text lets it (c/paddle.c)
            yield batch

    def first_pass(self, path: Path, diag: Diagnostics) -> Iterator[list[Event] | RawEvents]:
        """Scanned in C (``_core.scan``), an Event made, and normalised, only of what the pass takes
        (its metadata and steps); a batch the scan leaves to msgspec normalised whole."""
        scanning = FLOATS_AS_TEXT._replace(event=self._event)
        for batch in event_batches(path, diag, self.events, chrome_trace.BATCH_BYTES, scanned=scanning):
            if type(batch) is not RawEvents:
                normalise(batch, self.base_ns, self._normalise)
            yield batch

    def _event(self, text: bytes) -> Event:
        event = FLOATS_AS_TEXT.event(text)  # as Paddle.events decodes a batch's
        self._normalise(event)
        return event

    def _normalise(self, event: Event) -> None:
        """The name without its duration; the start as µs from start_time zero (the rank adds the
        zero's epoch ns): from ``start_time`` to the ns where it falls in the µs ``ts`` gives
        (Paddle computes it in float32: past ~8 ms from the zero it may not; a few ns either side of
        it are float32's rounding), else ``ts``."""
        name = event.name
        if type(name) is str and name.endswith("]"):
            event.name = _SUFFIX.sub("", name)
        if event.ph == "M" or event.ts is None:
            return
        start = None
        if event.args:
            try:
                start = _SPAN.decode(event.args).start_time
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass
        try:
            ts_ns = us_to_ns(event.ts)
        except (TypeError, ValueError, ArithmeticError):
            return  # said as a bad time where it is read
        if type(start) is str and start.endswith(" us"):
            relative = _us_text_to_ns(start[:-3])
            if relative is not None and -_SLACK_NS <= self.base_ns + relative - ts_ns < 1000 + _SLACK_NS:
                event.ts = start[:-3]
                return
        event.ts = _ns_text(ts_ns - self.base_ns)

    def route(self, process: str, thread: str, pid: Any, tid: Any) -> chrome_trace.Route:
        if thread.lower().startswith("stream") or process.startswith("GPU"):
            return chrome_trace.Route(_GPU, gpu_stream(pid, tid))
        return chrome_trace.Route(Layer.HOST, thread or f"thread {tid}")

    def step_number(self, event: Event, kind: Layer | str) -> int | None:
        name = event.name
        if event.cat == "ProfileStep" and type(name) is str and name.startswith("ProfileStep#") and \
                name[12:].isdecimal():
            return int(name[12:])
        return None

    def convert(self, event: Event, kind: Layer | str, lane: str) -> Converted | str:
        cat, name = event.cat, event.name
        if event.ph in ("s", "f", "t"):
            return _FLOWS
        if cat in _PHASES:
            return Converted(Layer.STEP, cat, name, "", None, on_device=False)
        if cat in _DEVICE_CATS or kind is _GPU:
            flow = _launch_flow(event, starts=False)
            if isinstance(name, str) and (communicates := collectives.nccl(name)) is not None:
                return Converted(Layer.COMM_OP, "NCCL", name, "NCCL", flow, meaning=comm_type(communicates))
            return Converted(Layer.STREAM, lane if kind is _GPU else gpu_stream(event.pid, event.tid),
                             name, _DEVICE_CATS.get(cat, NOT_COMPUTE), flow,
                             meaning=GPU_KERNEL if cat == "Kernel" else "")
        if cat == "CudaRuntime":
            return Converted(Layer.HOST, lane, name, "", _launch_flow(event, starts=True))
        if cat == "Communication":  # a collective as the host records it
            return Converted(Layer.COMM_OP, "Communication", name, "", None, on_device=False,
                             meaning=comm_type(collectives.framework(str(name)) or COLLECTIVE))
        return Converted(Layer.HOST, lane, name)



class _Correlation(msgspec.Struct):
    correlation: Any = msgspec.field(default=None, name="correlation id")


_CORRELATION = msgspec.json.Decoder(_Correlation)


def _launch_flow(event: Event, starts: bool) -> tuple[str, bool] | None:
    try:
        found = _CORRELATION.decode(event.args).correlation if event.args else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return None if found is None else (f"launch:{found}", starts)


# -- the protobuf form ----------------------------------------------------------------------------

class PaddleProtobuf(Paddle):
    """The protobuf export, read node by node as the events the JSON export would hold (epoch ns:
    the base is 0)."""

    def batches(self, path: Path, diag: Diagnostics) -> Iterator[list[Event]]:
        yield from _pb_events(path, diag)

    first_pass = Dialect.first_pass  # no text to scan: its nodes are made into events either way


_PYTHON_SIDE = frozenset({"ProfileStep", "Dataloader", "Forward", "Backward", "Optimization", "PythonOp",
                          "PythonUserDefined"})
_BATCH_NODES = 20_000


def _pb_events(path: Path, diag: Diagnostics) -> Iterator[list[Event]]:
    """The file's nodes as Chrome-trace events, a batch at a time. Only the framing is walked
    here (two levels: thread trees, then host nodes) as the file is read forward; protobuf
    decodes a run of whole nodes at a time (``_node_runs``), so memory holds a batch, never the
    file."""
    from . import paddle_nodetree_pb2 as pb

    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if not size:
            raise InputError(path, "byte 0", "empty file, expected Paddle's NodeTreesProto")
        names = {}
        for field, body in _fields(_Wire(f, path, 0), size, diag=None):
            if field == 4:  # extra_info, written after the trees: thread id -> thread name
                try:
                    entry = pb.ExtraInfoMap.FromString(body.take())
                except Exception as e:  # noqa: BLE001 - protobuf's DecodeError has no stable home
                    diag.warn("bad_event", f"{path}: byte {body.start}: not Paddle's extra info ({e}); a "
                              "thread name left out")
                    continue
                names[_text(entry.key)] = _text(entry.value)
        pid, batch = None, []
        for field, tree in _fields(_Wire(f, path, 0), size, diag):
            if field != 3:
                continue
            for start, data in _node_runs(tree, diag):
                try:  # a run of whole fields of a tree is itself a tree
                    nodes = pb.ThreadNodeTreeProto.FromString(data).host_nodes
                except Exception as e:  # noqa: BLE001 - protobuf's DecodeError has no stable home
                    raise InputError(path, f"byte {start}", f"not Paddle's host nodes ({e})") from None
                for node in nodes:
                    root = _is_root(node)  # each thread's tree hangs from a root, which is no event
                    if pid is None and not root:
                        pid = node.host_trace_event.process_id
                        batch += _names(pid, names)
                    batch += _node_events(node, root)
                if len(batch) >= _BATCH_NODES:
                    yield batch
                    batch = []
        yield batch


class _Wire:
    """A protobuf file read forward in chunks, for walking its framing without holding it."""

    def __init__(self, f: Any, path: Path, at: int) -> None:
        self.f, self.path = f, path
        f.seek(at)
        self.buf, self.pos, self.base = b"", 0, at  # base: the file offset of buf[0]

    @property
    def at(self) -> int:
        return self.base + self.pos

    def _fill(self, n: int) -> bool:
        if len(self.buf) - self.pos >= n:
            return True
        self.buf, self.base, self.pos = self.buf[self.pos:], self.base + self.pos, 0
        while len(self.buf) < n:
            more = self.f.read(max(_CHUNK, n - len(self.buf)))
            if not more:
                return False
            self.buf += more
        return True

    def varint(self) -> int | None:
        value = shift = 0
        while self._fill(1):
            byte = self.buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
        return None

    def take(self, n: int) -> bytes | None:
        if not self._fill(n):
            return None
        self.pos += n
        return self.buf[self.pos - n : self.pos]

    def between(self, start: int, stop: int) -> bytes:
        """The file's bytes [start, stop), from the buffer where it still holds them."""
        if start >= self.base:
            return self.buf[start - self.base : stop - self.base]
        here = self.base + len(self.buf)
        self.f.seek(start)
        data = self.f.read(stop - start)
        self.f.seek(here)
        return data

    def skip_to(self, at: int) -> None:
        if self.base <= at <= self.base + len(self.buf):
            self.pos = at - self.base
        else:
            self.f.seek(at)
            self.buf, self.pos, self.base = b"", 0, at


_CHUNK = 1 << 16  # read, and decoded by protobuf, at a time (a 1 MiB run left 25% more memory behind)


def _node_runs(tree: _Field, diag: Diagnostics) -> Iterator[tuple[int, bytes]]:
    """A thread tree's body as runs of whole fields of about ``_CHUNK`` bytes (file offset, bytes);
    a node cut off by a crash ends the last run, with a warning."""
    wire, end = tree.wire, tree.end
    start = wire.at
    while wire.at < end:
        here = wire.at
        key = wire.varint()
        length = wire.varint() if key is not None and key & 7 == 2 else None
        if key is None or (key & 7 == 2 and (length is None or wire.at + length > end)):
            wire.skip_to(here)  # a field cut off: the run ends before it
            break
        if key & 7 == 2:
            wire.skip_to(wire.at + length)
        elif key & 7 == 0:
            wire.varint()
        else:
            raise InputError(wire.path, f"byte {here}", f"not Paddle's protobuf export (wire type {key & 7})")
        if wire.at - start >= _CHUNK:
            yield start, wire.between(start, wire.at)
            start = wire.at
    if wire.at > start:
        yield start, wire.between(start, wire.at)
    if wire.at != end:
        diag.warn("truncated_file", f"{wire.path}: cut off at byte {end}; converted the whole nodes "
                  "before it")


class _Field(NamedTuple):
    """A length-delimited field: its body's place, and the reader positioned at it."""

    wire: _Wire
    start: int
    end: int  # past the file's end if it was cut off

    def take(self) -> bytes:
        return self.wire.take(self.end - self.start) or b""


def _fields(wire: _Wire, end: int, diag: Diagnostics | None) -> Iterator[tuple[int, _Field]]:
    """The length-delimited fields up to ``end`` as (number, field), in protobuf's wire format
    (varint keys and lengths); fields of other types are stepped over. The caller may read a
    field (``take``, or walk into it) or not: the next one is found either way. A file cut off by
    a crash: a thread tree it cuts is given as far as it goes (its whole nodes are read); then
    the walk stops, with a warning."""
    size = end
    while wire.at < end:
        key = wire.varint()
        kind = None if key is None else key & 7
        if kind == 2:
            length = wire.varint()
            if length is None:
                break
            body = wire.at
            if body + length > size:
                if key >> 3 == 3 and wire.at < size:  # a thread tree cut off: its whole nodes are kept
                    yield 3, _Field(wire, body, size)
                break
            yield key >> 3, _Field(wire, body, body + length)
            wire.skip_to(body + length)
        elif kind == 0:
            if wire.varint() is None:
                break
        elif kind in (1, 5):
            wire.skip_to(wire.at + (8 if kind == 1 else 4))
        else:
            raise InputError(wire.path, f"byte {wire.at}", f"not Paddle's protobuf export (wire type {kind})")
    if wire.at != end and diag is not None:
        diag.warn("truncated_file", f"{wire.path}: cut off at byte {size}; converted the whole nodes "
                  "before it")


def _is_root(node: Any) -> bool:
    host = node.host_trace_event
    return host.name == "root node" and host.start_ns == 0 and host.end_ns == (1 << 64) - 1


def _names(pid: int, threads: dict[str, str]) -> list[Event]:
    """The metadata the JSON export writes: the process, and each thread's two lanes."""
    made = [Event(ph="M", name="process_name", pid=pid, args=msgspec.Raw(
        msgspec.json.encode({"name": f"Process {pid} (CPU)"})))]
    for tid, name in threads.items():
        if tid.isdecimal():
            for side in ("Python", "C++"):
                made.append(Event(ph="M", name="thread_name", pid=pid, tid=f"{tid}({side})",
                                   args=_raw({"name": f"thread {tid}:{name}({side})"})))
    return made


def _node_events(node: Any, root: bool = False) -> list[Event]:
    """A host node (not the root), its memory events, its runtime calls and their device work, as
    JSON-export events. The root holds the runtime calls no host event encloses."""
    host = node.host_trace_event
    name = _text(host.name)
    cat = _event_types().get(host.type, "Operator")
    if cat == _OPERATOR and name.endswith(" kernel launch"):  # the protobuf's schema has no type for
        cat = "DygraphKernelLaunch"  # an operator's kernel launch: the JSON export's category for it
    tid = f"{host.thread_id}({'Python' if cat in _PYTHON_SIDE else 'C++'})"
    made = [] if root else [Event("X", name, host.process_id, tid, _ns_text(host.start_ns),
                                   _ns_text(host.end_ns - host.start_ns), cat)]
    for memory_node in node.mem_nodes:
        memory = memory_node.mem_event
        made.append(Event(ph="i", name="[memory]", pid=memory.process_id, tid=f"{memory.thread_id}(C++)",
                           ts=_ns_text(memory.timestamp_ns), cat=_MEMORY_TYPES.get(memory.type, "Memory"),
                           args=_raw({"place": _text(memory.place), "increase_bytes": memory.increase_bytes,
                                      "current_allocated": memory.current_allocated})))
    for runtime_node in node.runtime_nodes:
        call = runtime_node.runtime_trace_event
        made.append(Event("X", _text(call.name), call.process_id, f"{call.thread_id}(C++)",
                           _ns_text(call.start_ns), _ns_text(call.end_ns - call.start_ns), "CudaRuntime",
                           None, _raw({"correlation id": call.correlation_id})))
        for device_node in runtime_node.device_nodes:
            work = device_node.device_event
            made.append(Event("X", _text(work.name), work.device_id, work.stream_id, _ns_text(work.start_ns),
                               _ns_text(work.end_ns - work.start_ns), _event_types()[work.type], None,
                               _raw({"correlation id": work.correlation_id, "device": work.device_id,
                                     "stream": work.stream_id})))
    return made


def _text(value: str | bytes) -> str:
    """A string field's text. Protobuf hands back a proto2 string that is not UTF-8 (a damaged file)
    as bytes; it is read as the text files are, the bytes that are not UTF-8 as U+FFFD."""
    return value if type(value) is str else value.decode("utf-8", "replace")


def _raw(args: dict) -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode(args))


def _ns_text(ns: int) -> str:
    """ns as the µs text the readers parse exactly."""
    if ns < 0:
        return "-" + _ns_text(-ns)
    us, rest = divmod(ns, 1000)
    return f"{us}.{rest:03d}"


@cache
def _event_types() -> dict[int, str]:
    """The names of Paddle's event types (protobuf is imported only for a protobuf export)."""
    from . import paddle_nodetree_pb2 as pb
    return {value.number: value.name for value in pb.TracerEventTypeProto.DESCRIPTOR.values}


_MEMORY_TYPES = {0: "Allocate", 1: "Free", 2: "ReservedAllocate", 3: "ReservedFree"}


def _pb_start_ns(path: Path) -> int | None:
    """The start of the file's first host node: the profile's start, for telling runs apart."""
    from . import paddle_nodetree_pb2 as pb
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            for field, tree in _fields(_Wire(f, path, 0), size, None):
                for inner, at in _fields(tree.wire, tree.end, None) if field == 3 else ():
                    node = pb.HostTraceEventNodeProto.FromString(at.take()) if inner == 2 else None
                    if node is not None and not _is_root(node):
                        return node.host_trace_event.start_ns
    except Exception:  # noqa: BLE001 - a probe: the read says what is wrong
        return None
    return None


READER = Reader(
    name=NAME,
    folder="Paddle profiler files *.paddle_trace.json or *.paddle_trace.pb",
    sniff=sniff, rank_infos=rank_infos, read=read,
    files=True,  # reads the files of a folder, not the folder: its subfolders are walked on
    lone_files=("a Paddle profiler file",), lone_file=lone_file,
    ops_in_detail_only=True,  # its host operators are drawn in detail only
)
