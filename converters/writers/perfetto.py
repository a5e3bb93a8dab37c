"""Perfetto protobuf (``.pftrace``), encoded in self-contained chunks of packets.

Packets are encoded by hand (a few dozen bytes each) rather than through protobuf message
objects, which cost microseconds per field; the tests decode every output with Perfetto's own
``perfetto_trace_pb2`` to keep this honest. Reference: perfetto/protos/perfetto/trace/
``trace_packet.proto``, ``track_event/track_event.proto``, ``track_event/track_descriptor.proto``.

Layout: a root descriptor (uuid 0) that asks for explicit process ordering; one process track
per rank (``sibling_order_rank`` = rank); group tracks under it; lane tracks under those.

Each rank's summary and detail of each graph are packet sequences of their own. A sequence's
chunks (one per step) are written in step order and the size cap only ever drops a sequence's
*later* chunks, so what an earlier chunk interned is always in the file before its use. Track
descriptors are repeated once per sequence (identical), so no sequence depends on another.

The per-event loop, the hot loop of a conversion, is C (``_perfetto_core.c``): it encodes what
is constant for a track once, and what repeats (names, string and small-int arguments, the raw
args of an op run many times) once per sequence, interns new strings into ``_Interner``'s state
by its rules, writes nested args (Kineto's ``Input Dims``) as the JSON text ``_annotation`` makes
of them, and calls back into this module for what else changes a sequence's state (a track to
declare) or is rare (``_annotation``), so the rules below are the only ones.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from typing import Any

import msgspec
import orjson

from ..layout import Begin, End, JobProcess, Placement, Track, Value
from ..model import RankInfo, decoded_args
from ._perfetto_core import MAX_INTERNED as _MAX_INTERNED
from ._perfetto_core import encode_args, encode_chunk

_HEADER_SEQUENCE = 1
# TracePacket
_TIMESTAMP, _SEQ_ID, _TRACK_EVENT, _INTERNED, _SEQ_FLAGS, _TRACK_DESC = 8, 10, 11, 12, 13, 60
_FIRST_ON_SEQUENCE = 87
_CLEARED, _NEEDS_STATE = 1, 2
# TrackDescriptor
_UUID, _NAME, _PROCESS, _PARENT, _DESCRIPTION, _COUNTER_DESC = 1, 2, 3, 5, 14, 8
_COUNTER_UNIT, _UNIT_BYTES = 3, 3  # CounterDescriptor.unit = UNIT_SIZE_BYTES
_CHILD_ORDERING, _SIBLING_RANK, _PROCESS_ORDERING = 11, 12, 19
_EXPLICIT, _PROCESS_ORDERING_EXPLICIT = 3, 1
# ProcessDescriptor
_PID, _PROCESS_NAME = 1, 6
# TrackEvent
_ANNOTATIONS, _TYPE, _NAME_IID, _TRACK_UUID = 4, 9, 10, 11
_SLICE_BEGIN, _SLICE_END, _INSTANT, _COUNTER = 1, 2, 3, 4
# DebugAnnotation
_A_NAME_IID, _A_BOOL, _A_UINT, _A_INT, _A_DOUBLE, _A_STRING_IID = 1, 2, 3, 4, 5, 17
# InternedData
_EVENT_NAMES, _ANNOTATION_NAMES, _STRING_VALUES = 2, 3, 29
_EVENT_NAME, _A_NAME, _A_STRING = 23, 10, 6  # the same strings written inline


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int(field: int, value: int) -> bytes:
    return _key(field, 0) + _varint(value)


def _len(field: int, payload: bytes) -> bytes:
    return _key(field, 2) + _varint(len(payload)) + payload


def _str(field: int, text: str) -> bytes:
    return _len(field, text.encode("utf-8", "replace"))


_PACKET = _key(1, 2)  # Trace.packet
_ANNOTATION = _key(_ANNOTATIONS, 2)
_DOUBLE = _key(_A_DOUBLE, 1)
_NEEDS = _int(_SEQ_FLAGS, _NEEDS_STATE)
_pack_double = struct.Struct("<d").pack


class _Interner:
    """Ids for strings on one sequence, as ready-encoded ``field: iid`` bytes; collects the
    definitions the next packet must carry. Past ``_MAX_INTERNED`` strings, new ones are written
    inline (``inline_field``): strings that never repeat (op numbers in host info) would
    otherwise grow the table, and memory, with the input.

    The C core interns through this state directly (``refs``, ``pending``, the three fields), as
    ``__call__`` does, with no call per new string: these are the rules it follows, and where
    their field numbers live; ``pending`` is therefore only ever emptied in place."""

    def __init__(self, table_field: int, ref_field: int, inline_field: int) -> None:
        self.refs: dict[str, bytes] = {}
        self.table_field, self.ref_key, self.inline_field = table_field, _key(ref_field, 0), inline_field
        self.pending = bytearray()  # InternedData entries, encoded

    def __call__(self, text: str) -> bytes:
        ref = self.refs.get(text)
        if ref is None:
            if len(self.refs) >= _MAX_INTERNED:
                return _str(self.inline_field, text)
            iid = len(self.refs) + 1
            ref = self.refs[text] = self.ref_key + _varint(iid)
            self.pending += _len(self.table_field, _int(1, iid) + _str(2, text))
        return ref


class _Sequence:
    """One packet sequence: its id, its interning state and what it has declared."""

    def __init__(self, sequence_id: int) -> None:
        self.tail = _int(_SEQ_ID, sequence_id)
        self.started = False
        self.names = _Interner(_EVENT_NAMES, _NAME_IID, _EVENT_NAME)
        self.arg_names = _Interner(_ANNOTATION_NAMES, _A_NAME_IID, _A_NAME)
        self.strings = _Interner(_STRING_VALUES, _A_STRING_IID, _A_STRING)
        self.arg_cache: dict[tuple[str, Any], bytes] = {}  # (name, str or small int) -> bytes
        self.raw_caches: Any = None  # the C core's: raw JSON args and their members -> their annotations
        # track -> (begin-event prefix, end-packet suffix) once described on this sequence
        self.tracks: dict[Track, tuple[bytes, bytes]] = {}

    def interned(self) -> bytes:
        """The pending definitions as one InternedData field (as the C core's ``put_interned``)."""
        tables = (self.names.pending, self.arg_names.pending, self.strings.pending)
        if not any(tables):
            return b""
        pending = b"".join(tables)
        for table in tables:
            table.clear()
        return _len(_INTERNED, pending)


class PerfettoEncoder:
    """Encodes one Perfetto trace as header, chunks and marker; create one per output."""

    footer = b""

    def __init__(self, rank_index: int = -1) -> None:
        """One encoder per rank (``rank_index``: its position in the output), so ranks can be
        encoded in parallel: track uuids and sequence ids are then unique without talking.
        The header and the marker come from an encoder with no rank (-1)."""
        self._uuids: dict[Any, int] = {}
        self._uuid_base = (rank_index + 2) << 32
        self._sequence_base = (rank_index + 1) << 12
        self._sequences: dict[int, _Sequence] = {}

    def header(self, ranks: list[RankInfo], job: Iterable[JobProcess] = ()) -> bytes:
        """The root descriptor and one process track per rank, in rank order; then the job's own
        processes (``job``), ordered before the ranks."""
        out = bytearray()
        root = _int(_UUID, 0) + _int(_PROCESS_ORDERING, _PROCESS_ORDERING_EXPLICIT)
        first = _len(_TRACK_DESC, root) + _int(_SEQ_FLAGS, _CLEARED) + _int(_FIRST_ON_SEQUENCE, 1)
        header_tail = _int(_SEQ_ID, _HEADER_SEQUENCE)
        _packet(out, first + header_tail)
        for info in ranks:
            self._process(out, info.rank, info.title, info.rank, info.description if info.clock else "")
        for process in job:
            self._process(out, process.rank, process.title, -1, process.description)
        return bytes(out)

    def _process(self, out: bytearray, rank: int, title: str, order: int, description: str) -> None:
        process = _int(_PID, rank + 1) + _str(_PROCESS_NAME, title)
        desc = (
            _int(_UUID, self._process_uuid(rank)) + _str(_NAME, title)
            + _len(_PROCESS, process) + _int(_CHILD_ORDERING, _EXPLICIT)
            + _int(_SIBLING_RANK, order)
        )
        if description:
            desc += _str(_DESCRIPTION, description)
        _packet(out, _len(_TRACK_DESC, desc) + _int(_SEQ_ID, _HEADER_SEQUENCE))

    def chunk(self, sequence: int, events: Iterable[Begin | End | Value] | Placement) -> bytes:
        """Encode layout events (``Begin``/``End``/``Value``, or a ``Placement`` as its ``events()``
        would be) on ``sequence`` (one per rank, part, graph)."""
        seq = self._sequences.get(sequence)
        if seq is None:
            seq = self._sequences[sequence] = _Sequence(self._sequence_base + sequence + 1)
        out = bytearray()
        if not seq.started:
            _packet(out, _int(_SEQ_FLAGS, _CLEARED) + _int(_FIRST_ON_SEQUENCE, 1) + seq.tail)
            seq.started = True
        return bytes(out) + encode_chunk(seq, events, self._declare, _annotation, decoded_args, End, Value)

    def reserve(self, sequence: int, events: Iterable[Begin | End | Value] | Placement) -> None:
        """Number the tracks ``chunk`` would number for ``events`` (in the same order), writing
        nothing: for a chunk the size cap can never take, so later ones come out the same."""
        if type(events) is Placement:  # its tracks in the order of their first begin, then the values'
            for track in events.tracks:
                if track not in self._uuids:
                    self._new_uuid(track)
            events = events.values
        last = None  # a track's events run together: each run's track looked up once, not hashed per event
        for event in events:
            if event.track is not last and type(event) is not End:
                last = event.track
                if last not in self._uuids:
                    self._new_uuid(last)

    def marker(self, track: Track, ts_ns: int, name: str, args: dict[str, Any]) -> bytes:
        """An instant on its own track saying what the size cap left out."""
        seq = _Sequence(_HEADER_SEQUENCE)
        out = bytearray()
        self._declare(track, out, seq)
        body = (_int(_TYPE, _INSTANT) + _int(_TRACK_UUID, self._uuids[track]) + seq.names(name)
                + encode_args(seq, args, _annotation, decoded_args))
        _packet(out, _int(_TIMESTAMP, ts_ns) + _len(_TRACK_EVENT, body) + seq.interned() + _NEEDS + seq.tail)
        return bytes(out)

    # -- encoding -------------------------------------------------------------------------------

    def _process_uuid(self, rank: int) -> int:
        return rank + 1  # the same in every encoder: the header declares, the chunks refer

    def _new_uuid(self, key: Any) -> int:
        uuid = self._uuids[key] = self._uuid_base + len(self._uuids) + 1
        return uuid

    def _declare(self, track: Track, out: bytearray, seq: _Sequence) -> tuple[bytes, bytes]:
        """Describe the track (and its group) into ``out`` on first use on ``seq``."""
        group_key = ("group", track.rank, track.group)
        parent = _group_uuid(track.rank, track.group)
        if group_key not in seq.tracks:
            _descriptor(out, seq, parent, self._process_uuid(track.rank), track.group, track.group_order)
            seq.tracks[group_key] = (b"", b"")
        uuid = self._uuids.get(track) or self._new_uuid(track)
        _descriptor(out, seq, uuid, parent, track.lane, track.lane_order, track.counter)
        uuid_field = _int(_TRACK_UUID, uuid)
        if track.counter is not None:
            prefixes = seq.tracks[track] = (_int(_TYPE, _COUNTER) + uuid_field, b"")
            return prefixes
        end = _len(_TRACK_EVENT, _int(_TYPE, _SLICE_END) + uuid_field) + _NEEDS + seq.tail
        prefixes = seq.tracks[track] = (_int(_TYPE, _SLICE_BEGIN) + uuid_field, end)
        return prefixes


def _group_uuid(rank: int, group: str) -> int:
    """The same in every encoder, so that two encoders' lanes of one rank (its own, and its
    communication ops drawn once matched across ranks) share their group tracks."""
    return 1 << 62 | rank << 20 | zlib.crc32(group.encode()) & 0xFFFFF


def _packet(out: bytearray, payload: bytes) -> None:
    out += _PACKET
    out += _varint(len(payload))
    out += payload


def _descriptor(
    out: bytearray, seq: _Sequence, uuid: int, parent: int, name: str, order: int, counter: str | None = None
) -> None:
    desc = (
        _int(_UUID, uuid) + _int(_PARENT, parent) + _str(_NAME, name)
        + _int(_CHILD_ORDERING, _EXPLICIT) + _int(_SIBLING_RANK, order)
    )
    if counter is not None:  # CounterDescriptor, with unit UNIT_SIZE_BYTES where it is bytes
        desc += _len(_COUNTER_DESC, _int(_COUNTER_UNIT, _UNIT_BYTES) if counter == "bytes" else b"")
    _packet(out, _len(_TRACK_DESC, desc) + seq.tail)


def _annotation(key: Any, value: Any, seq: _Sequence) -> bytes:
    """One debug annotation: the rule the C core follows for every argument (the tests compare
    them), and its way for what it leaves to Python: ints past 64 bits, nested values holding
    floats (orjson's digits) or such ints, keys that are no strings, strings with surrogates.
    None is left out (b""). None of these repeat enough to cache."""
    value_bytes = _value(value, seq)
    if value_bytes is None:
        return b""
    item = seq.arg_names(str(key)) + value_bytes
    return _ANNOTATION + _varint(len(item)) + item


def _value(value: Any, seq: _Sequence) -> bytes | None:
    """A debug annotation's value field, or None to leave the argument out."""
    if value is None:
        return None
    if isinstance(value, bool):
        return _int(_A_BOOL, int(value))
    if isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            return _int(_A_INT, value)
        if 0 <= value < (1 << 64):
            return _int(_A_UINT, value)
        return seq.strings(str(value))
    if isinstance(value, float):
        return _DOUBLE + _pack_double(value)
    if not isinstance(value, str):  # nested: as JSON text (msgspec where ints pass 64 bits)
        try:
            value = orjson.dumps(value).decode()
        except TypeError:
            value = msgspec.json.encode(value).decode()
    return seq.strings(value)
