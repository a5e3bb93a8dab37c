"""Independent reader and structural checker for the traces trace2perfetto writes.

The test suite runs every output file through :func:`read_perfetto` or
:func:`read_chrome_json`. Both decode the file without any of the project's own code (the
Perfetto side uses the official ``perfetto_trace_pb2`` schema), check the layout the writers
promise, and raise :class:`TraceCheckError` naming the packet or event, the track and the
fault at the first violation. What they return is a :class:`DecodedTrace`; :func:`comparable`
reduces one to a set that is equal for the Perfetto and the JSON output of one input.

Perfetto layout checked:

* sequences: every packet that carries a track event or interned data has a
  ``trusted_packet_sequence_id``; the first packet of each sequence clears incremental state;
  a packet whose event uses an interned id says ``SEQ_NEEDS_INCREMENTAL_STATE``; every iid was
  defined on the same sequence since its last clear, and never redefined to another value;
* tracks: a root descriptor (uuid 0, ``PROCESS_ORDERING_EXPLICIT``) before any process track;
  one top-level process track per rank (``pid``, ``process_name`` "Rank N ...",
  ``sibling_order_rank``, ``child_ordering`` EXPLICIT), ordered like the ranks, with unique
  pids and names; every other track named and under a process; a parent declared before its
  child; a uuid never redeclared with other content; no two tracks with one path;
* events: on a track declared before them, with a timestamp and a known type; counters only
  on counter tracks and nothing else there; per track, in (timestamp, file) order, begins and
  ends form a balanced stack, pairing each end with the begin file order pairs it with (else
  the writer meant slices that overlap without nesting), and no end precedes its begin;
  every flow id starts on exactly one slice begin and terminates on exactly one slice begin.

Chrome JSON layout checked: a JSON array; known phases only; integer pid/tid and exact-ns
times, none negative; every pid named by ``process_name`` with a ``process_sort_index`` ordered like the
ranks; every (pid, tid) named by a unique ``thread_name``; ``X`` events with dur >= 0 that nest
per thread; every flow ``s`` paired with exactly one ``f`` (same cat and id, ``bp: "e"``; the
id a string or below 2**63), both inside a slice of their thread.
"""

from __future__ import annotations

import gzip
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import pairwise
from typing import Any, NoReturn

import orjson
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

__all__ = [
    "DecodedTrace",
    "ReadSlice",
    "TraceCheckError",
    "comparable",
    "read_chrome_json",
    "read_perfetto",
]

Path = tuple[str, ...]


class TraceCheckError(AssertionError):
    """A trace file breaks the layout the writers promise."""


@dataclass(frozen=True)
class ReadSlice:
    """One slice (or instant, with ``dur_ns == 0``) read back from a trace."""

    process: str  # process name, e.g. "Rank 0 (device 0)"
    track: Path  # path under the process, e.g. ("Ascend Hardware", "Stream 2")
    name: str
    start_ns: int  # Perfetto: absolute ts; JSON: round(ts * 1000), relative to the origin
    dur_ns: int
    args: dict = field(default_factory=dict, compare=False, hash=False)


@dataclass
class DecodedTrace:
    """Everything a trace holds, in format-neutral form."""

    processes: list[str]  # in rank order
    slices: list[ReadSlice]
    instants: list[ReadSlice]  # dur_ns == 0
    counters: list[tuple[str, Path, int, float]]  # process, track, ts_ns, value
    tracks: set[tuple[str, Path]]  # every (process, path) below a process
    flows: int = 0  # arrows, each bound to one start and one end


def comparable(trace: DecodedTrace) -> set[tuple]:
    """``{(process, track, name, start_ns - min_start, dur_ns)}`` over the slices.

    The Perfetto output has absolute times and the JSON output times relative to an origin;
    shifting both to the first slice makes the two outputs of one input compare equal.
    """
    if not trace.slices:
        return set()
    origin = min(s.start_ns for s in trace.slices)
    return {(s.process, s.track, s.name, s.start_ns - origin, s.dur_ns) for s in trace.slices}


# ----------------------------------------------------------------------------- shared helpers

JOB_PROCESSES = ("Critical path",)  # the job's own, drawn before the ranks (convert --critical-path)
_RANK_RE = re.compile(r"(?:Rank|(BASE|NEW) rank) (\d+)(?!\d)")  # the second: diff -o, two runs


def _fail(where: str, what: str) -> NoReturn:
    raise TraceCheckError(f"{where}: {what}")


def _gunzip(data: bytes) -> bytes:
    """Return *data*, decompressed first when it is gzip (starts with 1f 8b)."""
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _rank_of(name: str, where: str) -> tuple[str, int]:
    """The run ("" but in a comparison: BASE, then NEW) and rank N of a process named "Rank N ..."
    (or "BASE rank N ...", "NEW rank N ...")."""
    match = _RANK_RE.match(name)
    if match is None:
        _fail(where, f"process name {name!r} does not start with 'Rank N'")
    return match.group(1) or "", int(match.group(2))


def _check_rank_order(processes: Iterable[tuple[str, int, str]], order_field: str) -> list[str]:
    """Check the processes' order keys rise with their ranks, the job's own processes before them;
    return the names in that order.

    *processes* holds ``(name, order key, where)``; *order_field* names the key in messages.
    """
    processes = list(processes)
    job = [p for p in processes if p[0] in JOB_PROCESSES]
    by_rank: dict[tuple[str, int], tuple[str, int, str]] = {}
    for name, key, where in processes:
        if name in JOB_PROCESSES:
            continue
        rank = _rank_of(name, where)
        if rank in by_rank:
            side, number = rank
            _fail(where, f"{side + ' ' if side else ''}rank {number} appears twice ({by_rank[rank][0]!r} and "
                  f"{name!r})")
        by_rank[rank] = (name, key, where)
    ordered = [by_rank[rank] for rank in sorted(by_rank)]
    for name, key, where in job:
        if ordered and key >= ordered[0][1]:
            _fail(where, f"the job's process {name!r} has {order_field} {key}, not before the ranks'")
    ordered = job + ordered
    for (prev_name, prev_key, _), (name, key, where) in pairwise(ordered):
        if key <= prev_key:
            _fail(
                where,
                f"ranks out of order: {name!r} has {order_field} {key}, not above "
                f"{prev_key} of {prev_name!r}",
            )
    return [name for name, _, _ in ordered]


def _track_label(process: str | None, path: Path) -> str:
    return " / ".join([process or "<no process>", *path])


# ----------------------------------------------------------------------------- Perfetto

_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS_STATE = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
_END = pb.TrackEvent.TYPE_SLICE_END
_INSTANT = pb.TrackEvent.TYPE_INSTANT
_COUNTER = pb.TrackEvent.TYPE_COUNTER
_TYPE_NAMES = {_BEGIN: "SLICE_BEGIN", _END: "SLICE_END", _INSTANT: "INSTANT", _COUNTER: "COUNTER"}


@dataclass
class _Track:
    """A declared track: where it sits and what it may hold."""

    uuid: int
    process: str | None  # None only for the root
    path: Path
    is_counter: bool
    packet: int
    content: bytes  # serialized descriptor, to spot a conflicting redeclaration

    @property
    def label(self) -> str:
        return _track_label(self.process, self.path)


@dataclass
class _Event:
    """A slice begin/end or instant on one track, kept for pairing."""

    packet: int
    ts: int
    type: int
    name: str
    args: dict


@dataclass
class _Sequence:
    """Interned tables of one packet sequence since its last clear."""

    tables: dict[str, dict[int, str]] = field(default_factory=lambda: defaultdict(dict))


# Interned tables we resolve: InternedData field -> (entry value field, how messages name it).
_INTERNED = {
    "event_names": ("name", "event name"),
    "debug_annotation_names": ("name", "debug annotation name"),
    "debug_annotation_string_values": ("str", "debug annotation string value"),
}


class _PerfettoReader:
    """One pass over the packets with the state the checks need."""

    def __init__(self, trace: pb.Trace) -> None:
        self.packets = trace.packet
        self.first_declared = self._first_declarations()
        self.tracks: dict[int, _Track] = {}
        self.paths: dict[tuple[str, Path], int] = {}
        self.processes: list[tuple[str, int, str]] = []  # name, sibling_order_rank, where
        self.pids: dict[int, str] = {}
        self.sequences: dict[int, _Sequence] = {}
        self.events: dict[int, list[_Event]] = defaultdict(list)
        self.counters: list[tuple[str, Path, int, float]] = []
        self.flow_starts: dict[int, list[int]] = defaultdict(list)
        self.flow_ends: dict[int, list[int]] = defaultdict(list)

    def _first_declarations(self) -> dict[int, int]:
        """uuid -> index of the first packet declaring it, for 'declared too late' messages."""
        first: dict[int, int] = {}
        for i, packet in enumerate(self.packets):
            if packet.HasField("track_descriptor"):
                first.setdefault(packet.track_descriptor.uuid, i)
        return first

    def run(self) -> DecodedTrace:
        for i, packet in enumerate(self.packets):
            sequence = self._enter_sequence(i, packet)
            if packet.HasField("track_descriptor"):
                self._declare(i, packet.track_descriptor)
            if packet.HasField("track_event"):
                self._read_event(i, packet, sequence)
        if 0 not in self.tracks:
            _fail("trace", "no root track descriptor (uuid 0) with PROCESS_ORDERING_EXPLICIT")
        processes = _check_rank_order(self.processes, "sibling_order_rank")
        slices, instants = self._pair_all_slices()
        self._check_flows()
        return DecodedTrace(
            processes=processes,
            slices=slices,
            instants=instants,
            counters=self.counters,
            tracks=set(self.paths),
            flows=len(self.flow_starts),
        )

    # -- sequences and interning

    def _enter_sequence(self, i: int, packet: pb.TracePacket) -> _Sequence | None:
        """Apply the packet's sequence flags and interned data; return its sequence state."""
        where = f"packet #{i}"
        if not packet.HasField("trusted_packet_sequence_id"):
            if packet.HasField("track_event") or packet.HasField("interned_data"):
                _fail(where, "track event or interned data without trusted_packet_sequence_id")
            return None
        seq_id = packet.trusted_packet_sequence_id
        cleared = bool(packet.sequence_flags & _CLEARED) or packet.incremental_state_cleared
        if seq_id not in self.sequences and not cleared:
            _fail(
                where,
                f"first packet of sequence {seq_id} lacks SEQ_INCREMENTAL_STATE_CLEARED",
            )
        if cleared:
            self.sequences[seq_id] = _Sequence()
        sequence = self.sequences[seq_id]
        if packet.HasField("interned_data"):
            self._intern(where, sequence, packet.interned_data)
        return sequence

    @staticmethod
    def _intern(where: str, sequence: _Sequence, interned: pb.InternedData) -> None:
        for table, (value_field, what) in _INTERNED.items():
            known = sequence.tables[table]
            for entry in getattr(interned, table):
                value = getattr(entry, value_field)
                if isinstance(value, bytes):
                    value = value.decode("utf-8", errors="replace")
                if known.get(entry.iid, value) != value:
                    _fail(
                        where,
                        f"{what} iid {entry.iid} redefined from {known[entry.iid]!r} to "
                        f"{value!r} without clearing incremental state",
                    )
                known[entry.iid] = value

    # -- track descriptors

    def _declare(self, i: int, desc: pb.TrackDescriptor) -> None:
        where = f"packet #{i}"
        content = desc.SerializeToString(deterministic=True)
        known = self.tracks.get(desc.uuid)
        if known is not None:
            if known.content != content:
                _fail(
                    f"{where}, {known.label}",
                    f"track uuid {desc.uuid} redeclared with different content "
                    f"(first declared at packet #{known.packet})",
                )
            return
        for kind in ("thread", "chrome_thread", "chrome_process"):
            if desc.HasField(kind):
                _fail(where, f"track uuid {desc.uuid} uses `{kind}`: not part of the layout")
        if desc.uuid == 0:
            process, path = self._declare_root(where, desc)
        elif desc.HasField("process"):
            process, path = self._declare_process(where, desc)
        else:
            process, path = self._declare_child(where, desc)
        track = _Track(desc.uuid, process, path, desc.HasField("counter"), i, content)
        self.tracks[desc.uuid] = track
        if track.process is not None and track.path:
            key = (track.process, track.path)
            if key in self.paths:
                _fail(
                    f"{where}, {track.label}",
                    f"two tracks with one path (uuids {self.paths[key]} and {desc.uuid})",
                )
            self.paths[key] = desc.uuid

    @staticmethod
    def _declare_root(where: str, desc: pb.TrackDescriptor) -> tuple[None, Path]:
        if desc.HasField("process") or desc.HasField("counter") or desc.parent_uuid:
            _fail(where, "root track descriptor (uuid 0) must not be a process, counter or child")
        if desc.process_ordering != pb.TrackDescriptor.PROCESS_ORDERING_EXPLICIT:
            _fail(where, "root track descriptor (uuid 0) lacks PROCESS_ORDERING_EXPLICIT")
        return None, ()

    def _declare_process(self, where: str, desc: pb.TrackDescriptor) -> tuple[str, Path]:
        name = desc.process.process_name
        where = f"{where}, {name or '<unnamed process>'}"
        if 0 not in self.tracks:
            _fail(where, "process track declared before the root ordering descriptor (uuid 0)")
        if desc.parent_uuid:
            _fail(where, f"process track has parent_uuid {desc.parent_uuid}")
        if not desc.process.HasField("pid"):
            _fail(where, "process track has no pid")
        if desc.process.pid in self.pids:
            _fail(where, f"pid {desc.process.pid} already used by {self.pids[desc.process.pid]!r}")
        if name in self.pids.values():
            _fail(where, "two process tracks with one process_name")
        if name not in JOB_PROCESSES:
            _rank_of(name, where)
        if not desc.HasField("sibling_order_rank"):
            _fail(where, "process track has no sibling_order_rank")
        if desc.child_ordering != pb.TrackDescriptor.EXPLICIT:
            _fail(where, "process track child_ordering is not EXPLICIT")
        self.pids[desc.process.pid] = name
        self.processes.append((name, desc.sibling_order_rank, where))
        return name, ()

    def _declare_child(self, where: str, desc: pb.TrackDescriptor) -> tuple[str, Path]:
        name = desc.name or desc.static_name
        if not name:
            _fail(where, f"track uuid {desc.uuid} has no name")
        if not desc.parent_uuid:
            _fail(where, f"track {name!r} (uuid {desc.uuid}) is not under a process")
        parent = self.tracks.get(desc.parent_uuid)
        if parent is None:
            later = self.first_declared.get(desc.parent_uuid)
            status = f"declared later, at packet #{later}" if later is not None else "undeclared"
            _fail(where, f"parent uuid {desc.parent_uuid} of track {name!r} is {status}")
        if parent.process is None:
            _fail(where, f"track {name!r} (uuid {desc.uuid}) is not under a process")
        return parent.process, (*parent.path, name)

    # -- track events

    def _read_event(self, i: int, packet: pb.TracePacket, sequence: _Sequence | None) -> None:
        event = packet.track_event
        track = self._event_track(i, event)
        where = f"packet #{i}, {track.label}"
        if not packet.HasField("timestamp"):
            _fail(where, "track event without timestamp")
        kind = event.type
        if kind not in _TYPE_NAMES:
            _fail(where, f"track event of unknown type {kind}")
        if _uses_iids(event) and not packet.sequence_flags & _NEEDS_STATE:
            _fail(where, "track event uses interned ids without SEQ_NEEDS_INCREMENTAL_STATE")
        name = self._event_name(where, event, sequence)
        args = self._annotations(where, event.debug_annotations, sequence)
        self._note_flows(where, i, event)
        if kind == _COUNTER:
            if not track.is_counter:
                _fail(where, "COUNTER event on a track without a counter descriptor")
            if event.WhichOneof("counter_value_field") is None:
                _fail(where, "COUNTER event without a value")
            value = float(getattr(event, event.WhichOneof("counter_value_field")))
            self.counters.append((track.process, track.path, packet.timestamp, value))
            return
        if track.is_counter:
            _fail(where, f"{_TYPE_NAMES[kind]} event on a counter track")
        self.events[track.uuid].append(_Event(i, packet.timestamp, kind, name, args))

    def _event_track(self, i: int, event: pb.TrackEvent) -> _Track:
        """The declared track an event is on."""
        if not event.HasField("track_uuid"):
            _fail(f"packet #{i}", "track event without track_uuid")
        uuid = event.track_uuid
        track = self.tracks.get(uuid)
        if track is None:
            later = self.first_declared.get(uuid)
            if later is not None:
                _fail(
                    f"packet #{i}",
                    f"event on track uuid {uuid} before its descriptor (declared later, at "
                    f"packet #{later})",
                )
            _fail(f"packet #{i}", f"event on undeclared track uuid {uuid}")
        if track.process is None:
            _fail(f"packet #{i}", "event on the root track (uuid 0), not under a process")
        return track

    @staticmethod
    def _lookup(where: str, sequence: _Sequence | None, table: str, iid: int) -> str:
        value = sequence.tables[table].get(iid) if sequence is not None else None
        if value is None:
            what = _INTERNED[table][1]
            _fail(where, f"undefined {what} iid {iid} on this sequence since its last clear")
        return value

    def _event_name(self, where: str, event: pb.TrackEvent, sequence: _Sequence | None) -> str:
        if event.HasField("name_iid"):
            return self._lookup(where, sequence, "event_names", event.name_iid)
        return event.name

    def _annotations(
        self, where: str, annotations: Iterable[pb.DebugAnnotation], sequence: _Sequence | None
    ) -> dict[str, Any]:
        """Debug annotations as a plain dict, interned names and strings resolved."""
        args: dict[str, Any] = {}
        for ann in annotations:
            if ann.HasField("name_iid"):
                key = self._lookup(where, sequence, "debug_annotation_names", ann.name_iid)
            else:
                key = ann.name
            args[key] = self._annotation_value(where, ann, sequence)
        return args

    def _annotation_value(
        self, where: str, ann: pb.DebugAnnotation, sequence: _Sequence | None
    ) -> Any:
        kind = ann.WhichOneof("value")
        if kind == "string_value_iid":
            return self._lookup(
                where, sequence, "debug_annotation_string_values", ann.string_value_iid
            )
        if kind is not None:
            return getattr(ann, kind)
        if ann.dict_entries:
            return self._annotations(where, ann.dict_entries, sequence)
        if ann.array_values:
            return [self._annotation_value(where, item, sequence) for item in ann.array_values]
        return None

    def _note_flows(self, where: str, i: int, event: pb.TrackEvent) -> None:
        if event.flow_ids_old or event.terminating_flow_ids_old:
            _fail(where, "deprecated flow_ids_old / terminating_flow_ids_old used")
        if (event.flow_ids or event.terminating_flow_ids) and event.type != _BEGIN:
            _fail(
                where,
                f"flow on a {_TYPE_NAMES.get(event.type, event.type)} event, not on a SLICE_BEGIN",
            )
        for flow in event.flow_ids:
            self.flow_starts[flow].append(i)
        for flow in event.terminating_flow_ids:
            self.flow_ends[flow].append(i)

    # -- whole-trace checks

    def _pair_all_slices(self) -> tuple[list[ReadSlice], list[ReadSlice]]:
        slices: list[ReadSlice] = []
        instants: list[ReadSlice] = []
        for uuid, events in self.events.items():
            track = self.tracks[uuid]
            for begin, end in _pair_slices(track, events):
                dur = 0 if end is None else end.ts - begin.ts
                args = begin.args if end is None else {**begin.args, **end.args}
                read = ReadSlice(track.process, track.path, begin.name, begin.ts, dur, args)
                (instants if end is None else slices).append(read)
        return slices, instants

    def _check_flows(self) -> None:
        for flow in sorted(self.flow_starts.keys() | self.flow_ends.keys()):
            starts, ends = self.flow_starts.get(flow, []), self.flow_ends.get(flow, [])
            if len(starts) != 1 or len(ends) != 1:
                where = f"packet #{(starts or ends)[0]}"
                _fail(
                    where,
                    f"flow id {flow} starts on {len(starts)} event(s) and terminates on "
                    f"{len(ends)} (packets {starts} / {ends}); expected one each",
                )


def _uses_iids(event: pb.TrackEvent) -> bool:
    """Whether an event refers to any interned id."""
    return event.HasField("name_iid") or any(
        _annotation_uses_iids(ann) for ann in event.debug_annotations
    )


def _annotation_uses_iids(ann: pb.DebugAnnotation) -> bool:
    return (
        ann.HasField("name_iid")
        or ann.HasField("string_value_iid")
        or any(_annotation_uses_iids(child) for child in ann.dict_entries)
        or any(_annotation_uses_iids(child) for child in ann.array_values)
    )


def _pair_in_file_order(track: _Track, events: list[_Event]) -> dict[int, _Event] | None:
    """Pair begins and ends of one track in file order: the slices the writer meant.

    Returns end packet -> begin, or None when file order alone is unbalanced (then only the
    timestamp-order pairing is checked). Rejects an end stamped before its begin, which
    timestamp order alone would only see as some other imbalance.
    """
    meant: dict[int, _Event] = {}
    open_begins: list[_Event] = []
    for event in events:
        if event.type == _BEGIN:
            open_begins.append(event)
        elif event.type == _END:
            if not open_begins:
                return None
            begin = open_begins.pop()
            if event.ts < begin.ts:
                _fail(
                    f"packet #{event.packet}, {track.label}",
                    f"SLICE_END at ts {event.ts} is before its SLICE_BEGIN {begin.name!r} "
                    f"at ts {begin.ts} (packet #{begin.packet})",
                )
            meant[event.packet] = begin
    return None if open_begins else meant


def _pair_slices(track: _Track, events: list[_Event]) -> Iterable[tuple[_Event, _Event | None]]:
    """Yield (begin, end) per slice and (instant, None) per instant of one track.

    Events are taken in timestamp order, ties in file order, as the trace processor sorts
    them; begins and ends must form a balanced stack. Where the file order pairs an end with
    another begin, the writer meant slices that overlap without nesting (or that touch but
    were written out of order), which the trace processor would silently re-pair.
    """
    meant = _pair_in_file_order(track, events)
    stack: list[_Event] = []
    for event in sorted(events, key=lambda e: (e.ts, e.packet)):
        if event.type == _INSTANT:
            yield event, None
        elif event.type == _BEGIN:
            stack.append(event)
        elif not stack:
            _fail(
                f"packet #{event.packet}, {track.label}",
                f"SLICE_END at ts {event.ts} with no open slice",
            )
        else:
            begin = stack.pop()
            intended = meant.get(event.packet, begin) if meant is not None else begin
            if intended is not begin:
                _fail(
                    f"packet #{event.packet}, {track.label}",
                    f"slice {intended.name!r} [{intended.ts}, {event.ts}] (begin at packet "
                    f"#{intended.packet}) overlaps {begin.name!r} (begin at packet "
                    f"#{begin.packet}, ts {begin.ts}) without nesting: in timestamp order "
                    f"this SLICE_END closes {begin.name!r}",
                )
            yield begin, event
    if stack:
        begin = stack[-1]
        _fail(
            f"packet #{begin.packet}, {track.label}",
            f"SLICE_BEGIN {begin.name!r} at ts {begin.ts} is never closed "
            f"({len(stack)} slice(s) left open)",
        )


def read_perfetto(data: bytes) -> DecodedTrace:
    """Decode a Perfetto protobuf trace (optionally gzipped) and run every check."""
    trace = pb.Trace()
    try:
        trace.ParseFromString(_gunzip(data))
    except Exception as exc:  # protobuf raises DecodeError, upb may raise others
        raise TraceCheckError(f"trace: not a Perfetto Trace protobuf: {exc}") from exc
    return _PerfettoReader(trace).run()


# ----------------------------------------------------------------------------- Chrome JSON

_PHASES = {"M", "X", "i", "C", "s", "f"}
_NS_TOLERANCE = 0.05  # ns: float µs times relative to the origin resolve finer for days


@dataclass
class _JsonThread:
    """Slices of one (pid, tid), as integer ns intervals with their event index."""

    path: Path
    slices: list[tuple[int, int, int, str]] = field(default_factory=list)  # start, end, #, name


def _int_field(event: dict, key: str, where: str) -> int:
    value = event.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        _fail(where, f"{key!r} must be an integer, got {value!r}")
    return value


def _ns_field(event: dict, key: str, where: str) -> int:
    """A time in µs (int or float with up to 3 decimals) as integer ns."""
    value = event.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        _fail(where, f"{key!r} must be a number, got {value!r}")
    if abs(value) >= 2**53 / 1000:  # ns past what a double holds: the µs as written (JSON to the µs)
        return int(Decimal(repr(value)) * 1000)
    ns = round(value * 1000)
    if abs(value * 1000 - ns) > _NS_TOLERANCE:
        _fail(where, f"{key!r} = {value!r} µs is not a whole number of ns")
    return ns


def _str_field(event: dict, key: str, where: str) -> str:
    value = event.get(key)
    if not isinstance(value, str):
        _fail(where, f"{key!r} must be a string, got {value!r}")
    return value


class _JsonReader:
    """Checks over a Chrome trace event array: metadata first, then everything else."""

    def __init__(self, events: list) -> None:
        self.events = events
        self.process_names: dict[int, str] = {}
        self.sort_indices: dict[int, int] = {}
        self.threads: dict[tuple[int, int], _JsonThread] = {}
        self.slices: list[ReadSlice] = []
        self.instants: list[ReadSlice] = []
        self.counters: list[tuple[str, Path, int, float]] = []
        # (cat, id) -> phase -> [(event index, process, thread, ts)]
        self.flows: dict[tuple[Any, Any], dict[str, list[tuple[int, str, _JsonThread, int]]]]
        self.flows = defaultdict(lambda: {"s": [], "f": []})

    def run(self) -> DecodedTrace:
        for k, event in enumerate(self.events):
            if not isinstance(event, dict):
                _fail(f"event #{k}", f"not a JSON object: {event!r}")
            if event.get("ph") == "M":
                self._metadata(k, event)
        self._check_thread_names()
        for k, event in enumerate(self.events):
            self._event(k, event)
        processes = _check_rank_order(self._process_order_keys(), "process_sort_index")
        for (pid, _), thread in self.threads.items():
            _check_json_nesting(self.process_names[pid], thread)
        self._check_flows()
        return DecodedTrace(
            processes=processes,
            slices=self.slices,
            instants=self.instants,
            counters=self.counters,
            tracks={(self.process_names[pid], t.path) for (pid, _), t in self.threads.items()},
            flows=len(self.flows),
        )

    # -- metadata

    def _metadata(self, k: int, event: dict) -> None:
        where = f"event #{k}"
        kind = event.get("name")
        args = event.get("args")
        if kind not in ("process_name", "process_sort_index", "thread_name", "thread_sort_index"):
            return  # other metadata does not shape the layout
        if not isinstance(args, dict):
            _fail(where, f"{kind} metadata without args")
        pid = _int_field(event, "pid", where)
        if kind == "process_name":
            self._set_once(self.process_names, pid, _str_field(args, "name", where), where, kind)
        elif kind == "process_sort_index":
            self._set_once(
                self.sort_indices, pid, _int_field(args, "sort_index", where), where, kind
            )
        elif kind == "thread_name":
            tid = _int_field(event, "tid", where)
            path = tuple(_str_field(args, "name", where).split(" / "))
            if not all(path):
                _fail(where, f"thread name {args['name']!r} has an empty path component")
            known = self.threads.setdefault((pid, tid), _JsonThread(path))
            if known.path != path:
                _fail(where, f"pid {pid} tid {tid} renamed from {known.path} to {path}")
        else:
            _int_field(event, "tid", where)
            _int_field(args, "sort_index", where)

    @staticmethod
    def _set_once(table: dict[int, Any], pid: int, value: Any, where: str, kind: str) -> None:
        if table.setdefault(pid, value) != value:
            _fail(where, f"pid {pid} has two {kind} values: {table[pid]!r} and {value!r}")

    def _check_thread_names(self) -> None:
        seen: dict[tuple[int, Path], int] = {}
        for (pid, tid), thread in self.threads.items():
            if pid not in self.process_names:
                _fail(f"pid {pid}", f"thread {thread.path} in a pid without process_name")
            other = seen.setdefault((pid, thread.path), tid)
            if other != tid:
                _fail(
                    _track_label(self.process_names[pid], thread.path),
                    f"tids {other} and {tid} share one thread name",
                )

    def _process_order_keys(self) -> list[tuple[str, int, str]]:
        keys = []
        for pid, name in self.process_names.items():
            if pid not in self.sort_indices:
                _fail(f"pid {pid}, {name}", "process without process_sort_index")
            keys.append((name, self.sort_indices[pid], f"pid {pid}, {name}"))
        return keys

    # -- events

    def _process(self, event: dict, where: str) -> tuple[int, str]:
        pid = _int_field(event, "pid", where)
        if pid not in self.process_names:
            _fail(where, f"pid {pid} has no process_name metadata")
        return pid, self.process_names[pid]

    def _thread(self, event: dict, where: str) -> tuple[str, _JsonThread]:
        pid, process = self._process(event, where)
        tid = _int_field(event, "tid", where)
        thread = self.threads.get((pid, tid))
        if thread is None:
            _fail(where, f"{process}: tid {tid} has no thread_name metadata")
        return process, thread

    def _event(self, k: int, event: dict) -> None:
        phase = event.get("ph")
        where = f"event #{k}"
        if phase not in _PHASES:
            _fail(where, f"unexpected phase {phase!r}")
        if phase == "M":
            return
        args = event.get("args", {})
        if not isinstance(args, dict):
            _fail(where, f"args must be an object, got {args!r}")
        ts = _ns_field(event, "ts", where)
        if ts < 0:  # Perfetto drops these (trace_sorter_negative_timestamp_dropped)
            _fail(where, f"negative ts {ts} ns")
        if phase == "X":
            self._complete(k, event, ts, args)
        elif phase == "i":
            self._instant(event, where, ts, args)
        elif phase == "C":
            self._counter(event, where, ts, args)
        else:
            self._flow(k, event, ts)

    def _complete(self, k: int, event: dict, ts: int, args: dict) -> None:
        where = f"event #{k}"
        process, thread = self._thread(event, where)
        name = _str_field(event, "name", where)
        dur = _ns_field(event, "dur", where)
        if dur < 0:
            _fail(
                f"{where}, {_track_label(process, thread.path)}",
                f"X event {name!r} has negative dur {dur} ns",
            )
        thread.slices.append((ts, ts + dur, k, name))
        self.slices.append(ReadSlice(process, thread.path, name, ts, dur, args))

    def _instant(self, event: dict, where: str, ts: int, args: dict) -> None:
        scope = event.get("s", "t")
        name = _str_field(event, "name", where)
        if scope == "t":
            process, thread = self._thread(event, where)
            path = thread.path
        elif scope == "p":
            process, path = self._process(event, where)[1], ()
        elif scope == "g":
            process, path = "", ()
        else:
            _fail(where, f"instant scope {scope!r} is not t, p or g")
        self.instants.append(ReadSlice(process, path, name, ts, 0, args))

    def _counter(self, event: dict, where: str, ts: int, args: dict) -> None:
        _, process = self._process(event, where)
        name = _str_field(event, "name", where)
        if not args:
            _fail(where, f"counter {name!r} without values")
        for key, value in args.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                _fail(where, f"counter {name!r} series {key!r} is not a number: {value!r}")
            # the series as the trace processor names it: "<name> <key>" (our writer splits a lane
            # at its last space so that this is the lane)
            self.counters.append((process, (f"{name} {key}",), ts, float(value)))

    def _flow(self, k: int, event: dict, ts: int) -> None:
        where = f"event #{k}"
        process, thread = self._thread(event, where)
        if "id" not in event:
            _fail(where, "flow event without id")
        if not isinstance(event["id"], str) and not 0 <= event["id"] < 2**63:
            _fail(where, f"flow id {event['id']}: not a string, not below 2**63 (Perfetto: flow_invalid_id)")
        if event["ph"] == "f" and event.get("bp") != "e":
            _fail(where, "flow end without bp 'e' (it would bind to the next slice)")
        key = (event.get("cat"), event["id"])
        self.flows[key][event["ph"]].append((k, process, thread, ts))

    # -- whole-trace checks

    def _check_flows(self) -> None:
        for (cat, flow_id), ends in self.flows.items():
            starts, finishes = ends["s"], ends["f"]
            if len(starts) != 1 or len(finishes) != 1:
                first = (starts or finishes)[0][0]
                _fail(
                    f"event #{first}",
                    f"flow cat {cat!r} id {flow_id!r} has {len(starts)} 's' and "
                    f"{len(finishes)} 'f' events; expected one each",
                )
            for k, process, thread, ts in (starts[0], finishes[0]):
                if not any(start <= ts <= end for start, end, _, _ in thread.slices):
                    _fail(
                        f"event #{k}, {_track_label(process, thread.path)}",
                        f"flow cat {cat!r} id {flow_id!r} at ts {ts} ns is inside no slice",
                    )


def _check_json_nesting(process: str, thread: _JsonThread) -> None:
    """Slices of one thread, sorted by (ts, -dur), must nest: no partial overlap."""
    stack: list[tuple[int, int, int, str]] = []
    for start, end, k, name in sorted(thread.slices, key=lambda s: (s[0], -(s[1] - s[0]), s[2])):
        while stack and stack[-1][1] <= start:
            stack.pop()
        if stack and end > stack[-1][1]:
            outer_start, outer_end, outer_k, outer_name = stack[-1]
            _fail(
                f"event #{k}, {_track_label(process, thread.path)}",
                f"slice {name!r} [{start}, {end}] ns partially overlaps {outer_name!r} "
                f"[{outer_start}, {outer_end}] ns (event #{outer_k})",
            )
        stack.append((start, end, k, name))


def read_chrome_json(data: bytes) -> DecodedTrace:
    """Parse a Chrome trace JSON array (optionally gzipped) and run every check."""
    try:
        events = orjson.loads(_gunzip(data))
    except orjson.JSONDecodeError as exc:
        raise TraceCheckError(f"trace: not JSON: {exc}") from exc
    if not isinstance(events, list):
        _fail("trace", f"expected a JSON array of events, got {type(events).__name__}")
    return _JsonReader(events).run()
