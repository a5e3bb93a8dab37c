"""Perfetto protobuf (``.pftrace``), streamed: one ``TracePacket`` at a time.

Packets are encoded by hand (a few dozen bytes each) rather than through protobuf message
objects, which cost microseconds per field; the tests decode every output with Perfetto's own
``perfetto_trace_pb2`` to keep this honest. Reference: perfetto/protos/perfetto/trace/
``trace_packet.proto``, ``track_event/track_event.proto``, ``track_event/track_descriptor.proto``.

Layout: a root descriptor (uuid 0) that asks for explicit process ordering; one process track
per rank (``sibling_order_rank`` = rank); group tracks under it; lane tracks under those. Names
of events, argument names and string argument values are interned on the one sequence.
"""

from __future__ import annotations

import struct
from typing import Any, BinaryIO

import orjson

from ..layout import Track
from ..model import RankInfo, Slice

_SEQUENCE_ID = 1
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
_SEQ = _int(_SEQ_ID, _SEQUENCE_ID)


class _Interner:
    """Ids for strings on one sequence; collects the definitions a packet must carry."""

    def __init__(self, field: int, value_field: int = 2) -> None:
        self.ids: dict[str, int] = {}
        self.field, self.value_field = field, value_field
        self.pending: list[bytes] = []

    def __call__(self, text: str) -> int:
        iid = self.ids.get(text)
        if iid is None:
            iid = self.ids[text] = len(self.ids) + 1
            self.pending.append(_len(self.field, _int(1, iid) + _str(self.value_field, text)))
        return iid


class PerfettoWriter:
    """Writes one Perfetto trace to ``out``; create one per output."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._names = _Interner(_EVENT_NAMES)
        self._arg_names = _Interner(_ANNOTATION_NAMES)
        self._strings = _Interner(_STRING_VALUES)
        self._uuids: dict[Any, int] = {}
        self._processes: dict[int, int] = {}
        self._end_events: dict[int, bytes] = {}
        self._arg_cache: dict[tuple[str, type, Any], bytes] = {}
        self.bytes_written = 0
        root = _int(_UUID, 0) + _int(_PROCESS_ORDERING, _PROCESS_ORDERING_EXPLICIT)
        self._packet(
            _len(_TRACK_DESC, root) + _int(_SEQ_FLAGS, _CLEARED) + _int(_FIRST_ON_SEQUENCE, 1)
        )

    def add_rank(self, info: RankInfo) -> None:
        """Declare the rank's process track; call in rank order before its slices."""
        uuid = self._new_uuid(("rank", info.rank))
        self._processes[info.rank] = uuid
        process = _int(_PID, info.rank + 1) + _str(_PROCESS_NAME, info.title)
        desc = (
            _int(_UUID, uuid) + _str(_NAME, info.title) + _len(_PROCESS, process)
            + _int(_CHILD_ORDERING, _EXPLICIT) + _int(_SIBLING_RANK, info.rank)
        )
        if info.clock:
            desc += _str(_DESCRIPTION, f"{info.format} profile {info.path}; times: {info.clock}")
        self._packet(_len(_TRACK_DESC, desc))

    def begin(self, track: Track, s: Slice) -> None:
        uuid = self._track(track)
        event = _int(_TYPE, _SLICE_BEGIN) + _int(_TRACK_UUID, uuid) + _int(_NAME_IID, self._names(s.name))
        if s.args:
            event += self._annotations(s.args)
        self._event(s.start_ns, event)

    def end(self, track: Track, ts_ns: int) -> None:
        uuid = self._track(track)
        self._packet(_int(_TIMESTAMP, ts_ns) + self._end_events[uuid])

    def instant(self, track: Track, ts_ns: int, name: str, args: dict[str, Any] | None = None) -> None:
        event = _int(_TYPE, _INSTANT) + _int(_TRACK_UUID, self._track(track))
        event += _int(_NAME_IID, self._names(name))
        if args:
            event += self._annotations(args)
        self._event(ts_ns, event)

    def close(self) -> None:
        self._out.flush()

    # -- encoding -------------------------------------------------------------------------------

    def _packet(self, payload: bytes) -> None:
        data = _PACKET + _varint(len(payload) + len(_SEQ)) + payload + _SEQ
        self._out.write(data)
        self.bytes_written += len(data)

    def _event(self, ts_ns: int, event: bytes) -> None:
        packet = _int(_TIMESTAMP, ts_ns) + _len(_TRACK_EVENT, event)
        interned = self._names.pending + self._arg_names.pending + self._strings.pending
        if interned:
            packet += _len(_INTERNED, b"".join(interned))
            self._names.pending, self._arg_names.pending, self._strings.pending = [], [], []
        self._packet(packet + _int(_SEQ_FLAGS, _NEEDS_STATE))

    def _annotations(self, args: dict[str, Any]) -> bytes:
        parts = []
        cache = self._arg_cache
        for key, value in args.items():
            # Args repeat (task types, stream ids, transports): reuse their encoding. Floats and
            # large ints rarely repeat and would only grow the cache.
            cacheable = isinstance(value, str) or (type(value) is int and 0 <= value < _SMALL)
            item = (key, type(value), value)
            encoded = cache.get(item) if cacheable else None
            if encoded is None:
                value_bytes = self._value(value)
                if value_bytes is None:
                    continue
                encoded = _len(_ANNOTATIONS, _int(_A_NAME_IID, self._arg_names(str(key))) + value_bytes)
                if cacheable:
                    cache[item] = encoded
            parts.append(encoded)
        return b"".join(parts)

    def _value(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, bool):
            return _int(_A_BOOL, int(value))
        if isinstance(value, int):
            if -(1 << 63) <= value < (1 << 63):
                return _int(_A_INT, value)
            if 0 <= value < (1 << 64):
                return _int(_A_UINT, value)
            return _int(_A_STRING_IID, self._strings(str(value)))
        if isinstance(value, float):
            return _double(_A_DOUBLE, value)
        if not isinstance(value, str):
            value = orjson.dumps(value).decode()
        return _int(_A_STRING_IID, self._strings(value))

    def _new_uuid(self, key: Any) -> int:
        uuid = self._uuids[key] = len(self._uuids) + 1
        return uuid

    def _track(self, track: Track) -> int:
        uuid = self._uuids.get(track)
        if uuid is not None:
            return uuid
        group_key = ("group", track.rank, track.group)
        parent = self._uuids.get(group_key)
        if parent is None:
            parent = self._new_uuid(group_key)
            self._descriptor(parent, self._processes[track.rank], track.group, track.group_order)
        uuid = self._new_uuid(track)
        self._descriptor(uuid, parent, track.lane, track.lane_order)
        self._end_events[uuid] = _len(
            _TRACK_EVENT, _int(_TYPE, _SLICE_END) + _int(_TRACK_UUID, uuid)
        ) + _int(_SEQ_FLAGS, _NEEDS_STATE)
        return uuid

    def _descriptor(self, uuid: int, parent: int, name: str, order: int) -> None:
        desc = (
            _int(_UUID, uuid) + _int(_PARENT, parent) + _str(_NAME, name)
            + _int(_CHILD_ORDERING, _EXPLICIT) + _int(_SIBLING_RANK, order)
        )
        self._packet(_len(_TRACK_DESC, desc))
