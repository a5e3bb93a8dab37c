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
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

import orjson

from ..layout import Begin, End, Track
from ..model import RankInfo

_HEADER_SEQUENCE = 1
# TracePacket
_TIMESTAMP, _SEQ_ID, _TRACK_EVENT, _INTERNED, _SEQ_FLAGS, _TRACK_DESC = 8, 10, 11, 12, 13, 60
_FIRST_ON_SEQUENCE = 87
_CLEARED, _NEEDS_STATE = 1, 2
# TrackDescriptor
_UUID, _NAME, _PROCESS, _PARENT, _DESCRIPTION = 1, 2, 3, 5, 14
_CHILD_ORDERING, _SIBLING_RANK, _PROCESS_ORDERING = 11, 12, 19
_EXPLICIT, _PROCESS_ORDERING_EXPLICIT = 3, 1
# ProcessDescriptor
_PID, _PROCESS_NAME = 1, 6
# TrackEvent
_ANNOTATIONS, _TYPE, _NAME_IID, _TRACK_UUID = 4, 9, 10, 11
_SLICE_BEGIN, _SLICE_END, _INSTANT = 1, 2, 3
# DebugAnnotation
_A_NAME_IID, _A_BOOL, _A_UINT, _A_INT, _A_DOUBLE, _A_STRING_IID = 1, 2, 3, 4, 5, 17
# InternedData
_EVENT_NAMES, _ANNOTATION_NAMES, _STRING_VALUES = 2, 3, 29


def _varint(value: int) -> bytes:
    if 0 <= value < _SMALL:
        return _SMALL_VARINTS[value]
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = 1 << 14
_SMALL_VARINTS = [bytes([v]) if v < 0x80 else bytes([(v & 0x7F) | 0x80, v >> 7]) for v in range(_SMALL)]


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int(field: int, value: int) -> bytes:
    return _key(field, 0) + _varint(value)


def _len(field: int, payload: bytes) -> bytes:
    return _key(field, 2) + _varint(len(payload)) + payload


def _str(field: int, text: str) -> bytes:
    return _len(field, text.encode("utf-8", "replace"))


def _double(field: int, value: float) -> bytes:
    return _key(field, 1) + struct.pack("<d", value)


_PACKET = _key(1, 2)  # Trace.packet


class _Interner:
    """Ids for strings on one sequence; collects the definitions a packet must carry."""

    def __init__(self, field: int) -> None:
        self.ids: dict[str, int] = {}
        self.field = field
        self.pending: list[bytes] = []

    def __call__(self, text: str) -> int:
        iid = self.ids.get(text)
        if iid is None:
            iid = self.ids[text] = len(self.ids) + 1
            self.pending.append(_len(self.field, _int(1, iid) + _str(2, text)))
        return iid


class _Sequence:
    """One packet sequence: its id and its interning state."""

    def __init__(self, sequence_id: int) -> None:
        self.tail = _int(_SEQ_ID, sequence_id)
        self.started = False
        self.names = _Interner(_EVENT_NAMES)
        self.arg_names = _Interner(_ANNOTATION_NAMES)
        self.strings = _Interner(_STRING_VALUES)
        self.arg_cache: dict[tuple[str, type, Any], bytes] = {}
        self.declared: set[int] = set()  # track uuids described on this sequence

    def interned(self) -> bytes:
        pending = self.names.pending + self.arg_names.pending + self.strings.pending
        if not pending:
            return b""
        self.names.pending, self.arg_names.pending, self.strings.pending = [], [], []
        return _len(_INTERNED, b"".join(pending))


class PerfettoEncoder:
    """Encodes one Perfetto trace as header, chunks and marker; create one per output."""

    footer = b""

    def __init__(self) -> None:
        self._uuids: dict[Any, int] = {}
        self._sequences: dict[int, _Sequence] = {}
        self._end_events: dict[int, bytes] = {}

    def header(self, ranks: list[RankInfo]) -> bytes:
        """The root descriptor and one process track per rank, in rank order."""
        out = bytearray()
        root = _int(_UUID, 0) + _int(_PROCESS_ORDERING, _PROCESS_ORDERING_EXPLICIT)
        first = _len(_TRACK_DESC, root) + _int(_SEQ_FLAGS, _CLEARED) + _int(_FIRST_ON_SEQUENCE, 1)
        header_tail = _int(_SEQ_ID, _HEADER_SEQUENCE)
        _packet(out, first, header_tail)
        for info in ranks:
            uuid = self._process_uuid(info.rank)
            process = _int(_PID, info.rank + 1) + _str(_PROCESS_NAME, info.title)
            desc = (
                _int(_UUID, uuid) + _str(_NAME, info.title) + _len(_PROCESS, process)
                + _int(_CHILD_ORDERING, _EXPLICIT) + _int(_SIBLING_RANK, info.rank)
            )
            if info.clock:
                desc += _str(_DESCRIPTION, f"{info.format} profile {info.path}; times: {info.clock}")
            _packet(out, _len(_TRACK_DESC, desc), header_tail)
        return bytes(out)

    def chunk(self, sequence: int, events: Iterable[Begin | End]) -> bytes:
        """Encode layout events on ``sequence`` (any int; one per rank and part)."""
        seq = self._sequences.get(sequence)
        if seq is None:
            seq = self._sequences[sequence] = _Sequence(sequence + _HEADER_SEQUENCE + 1)
        out = bytearray()
        if not seq.started:
            _packet(out, _int(_SEQ_FLAGS, _CLEARED) + _int(_FIRST_ON_SEQUENCE, 1), seq.tail)
            seq.started = True
        for event in events:
            uuid = self._track(event.track, out, seq)
            if type(event) is End:
                _packet(out, _int(_TIMESTAMP, event.ts_ns) + self._end_events[uuid], seq.tail)
                continue
            s = event.slice
            body = _BEGIN + _int(_TRACK_UUID, uuid) + _int(_NAME_IID, seq.names(s.name))
            if s.args:
                body += self._annotations(s.args, seq)
            self._event(out, seq, s.start_ns, body)
        return bytes(out)

    def marker(self, track: Track, ts_ns: int, name: str, args: dict[str, Any]) -> bytes:
        """An instant on its own track saying what the size cap left out."""
        seq = _Sequence(_HEADER_SEQUENCE)
        out = bytearray()
        uuid = self._track(track, out, seq)
        body = _int(_TYPE, _INSTANT) + _int(_TRACK_UUID, uuid) + _int(_NAME_IID, seq.names(name))
        self._event(out, seq, ts_ns, body + self._annotations(args, seq))
        return bytes(out)

    # -- encoding -------------------------------------------------------------------------------

    def _event(self, out: bytearray, seq: _Sequence, ts_ns: int, body: bytes) -> None:
        payload = _int(_TIMESTAMP, ts_ns) + _len(_TRACK_EVENT, body) + seq.interned() + _NEEDS
        _packet(out, payload, seq.tail)

    def _annotations(self, args: dict[str, Any], seq: _Sequence) -> bytes:
        parts = []
        cache = seq.arg_cache
        for key, value in args.items():
            # Args repeat (task types, stream ids, transports): reuse their encoding. Floats and
            # large ints rarely repeat and would only grow the cache.
            cacheable = isinstance(value, str) or (type(value) is int and 0 <= value < _SMALL)
            item = (key, type(value), value)
            encoded = cache.get(item) if cacheable else None
            if encoded is None:
                value_bytes = _value(value, seq)
                if value_bytes is None:
                    continue
                encoded = _len(_ANNOTATIONS, _int(_A_NAME_IID, seq.arg_names(str(key))) + value_bytes)
                if cacheable:
                    cache[item] = encoded
            parts.append(encoded)
        return b"".join(parts)

    def _process_uuid(self, rank: int) -> int:
        return self._uuids.get(("rank", rank)) or self._new_uuid(("rank", rank))

    def _new_uuid(self, key: Any) -> int:
        uuid = self._uuids[key] = len(self._uuids) + 1
        return uuid

    def _track(self, track: Track, out: bytearray, seq: _Sequence) -> int:
        """The track's uuid, describing it (and its group) into ``out`` on first use on ``seq``."""
        uuid = self._uuids.get(track)
        if uuid is not None and uuid in seq.declared:
            return uuid
        group_key = ("group", track.rank, track.group)
        parent = self._uuids.get(group_key) or self._new_uuid(group_key)
        if parent not in seq.declared:
            _descriptor(out, seq, parent, self._process_uuid(track.rank), track.group, track.group_order)
            seq.declared.add(parent)
        if uuid is None:
            uuid = self._new_uuid(track)
            self._end_events[uuid] = _len(_TRACK_EVENT, _END + _int(_TRACK_UUID, uuid)) + _NEEDS
        _descriptor(out, seq, uuid, parent, track.lane, track.lane_order)
        seq.declared.add(uuid)
        return uuid


_BEGIN = _int(_TYPE, _SLICE_BEGIN)
_END = _int(_TYPE, _SLICE_END)
_NEEDS = _int(_SEQ_FLAGS, _NEEDS_STATE)


def _packet(out: bytearray, payload: bytes, tail: bytes) -> None:
    out += _PACKET
    out += _varint(len(payload) + len(tail))
    out += payload
    out += tail


def _descriptor(out: bytearray, seq: _Sequence, uuid: int, parent: int, name: str, order: int) -> None:
    desc = (
        _int(_UUID, uuid) + _int(_PARENT, parent) + _str(_NAME, name)
        + _int(_CHILD_ORDERING, _EXPLICIT) + _int(_SIBLING_RANK, order)
    )
    _packet(out, _len(_TRACK_DESC, desc), seq.tail)


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
        return _int(_A_STRING_IID, seq.strings(str(value)))
    if isinstance(value, float):
        return _double(_A_DOUBLE, value)
    if not isinstance(value, str):
        value = orjson.dumps(value).decode()
    return _int(_A_STRING_IID, seq.strings(value))
