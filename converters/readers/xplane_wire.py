"""An XSpace's wire (``xplane.proto``), read without holding it: its top-level fields found by
their length prefixes (``frames``), a plane's fields but its lines (``plane_fields``), and a line a
piece at a time (``lines``); the messages decoded by protobuf (``xplane_pb2``). What the records
mean is ``xplane``'s (docs/formats.md, XSpace)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from ..errors import InputError
from ._core import line_fields

PLANES, HOSTNAMES = 1, 4  # XSpace's fields: planes, errors (2), warnings (3), hostnames
_SPACE_FIELDS = frozenset({1, 2, 3, 4})
_LINES, _EVENTS = 3, 4  # XPlane's lines, XLine's events
EVENT_BATCH = 20_000  # a line's events decoded at a time
_PIECE = 1 << 22  # a line's bytes read at a time: its whole fields taken, the rest read on with the next
_PEEK = 4096  # a plane's id and name come first (fields 1, 2): read this much to learn its name


class Frame(NamedTuple):
    """One top-level field of the XSpace: its number, where its bytes begin, how many."""

    number: int
    at: int
    size: int


def _varint(f: BinaryIO, path: Path) -> int | None:
    """The varint at the file's position; None at the end of the file."""
    value, shift = 0, 0
    while True:
        byte = f.read(1)
        if not byte:
            if shift:
                raise cut(path, f.tell(), "inside a field's length")
            return None
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return value
        shift += 7
        if shift > 63:
            raise InputError(path, f"byte {f.tell()}", "not an XSpace protobuf (a varint of over 9 bytes)")


def cut(path: Path, at: int, inside: str) -> InputError:
    return InputError(path, f"byte {at}", f"the XSpace is cut {inside}: the file ends before the message "
                      "does", "a copy stopped early, or a profile still being written")


def frames(path: Path) -> Iterator[Frame]:
    """The XSpace's top-level fields in file order, found by their length prefixes alone.

    Raises:
        InputError: the file is no XSpace (another wire type or field), or is cut.
    """
    size = path.stat().st_size
    with path.open("rb") as f:
        while (key := _varint(f, path)) is not None:
            number, kind = key >> 3, key & 7
            if kind != 2 or number not in _SPACE_FIELDS:
                raise InputError(path, f"byte {f.tell()}",
                                 f"not an XSpace protobuf (field {number}, wire type {kind})")
            length = _varint(f, path)
            if length is None:
                raise cut(path, f.tell(), "inside a field's length")
            at = f.tell()
            if at + length > size:
                raise cut(path, at, f"inside its {'plane' if number == PLANES else 'field'} at byte {at} "
                           f"({length:,} bytes, {size - at:,} left)")
            yield Frame(number, at, length)
            f.seek(length, 1)


def read_frame(path: Path, frame: Frame) -> bytes:
    with path.open("rb") as f:
        f.seek(frame.at)
        return f.read(frame.size)


def pb():
    from . import xplane_pb2  # protobuf is imported only when an XSpace is read

    return xplane_pb2


def plane(path: Path, frame: Frame) -> Any:
    """The plane without its lines (its name, stats and metadata): what ``lines`` decodes apart."""
    return layout(path, frame)[0]


def layout(path: Path, frame: Frame) -> tuple[Any, list[Frame]]:
    """The plane without its lines, decoded, and where each of its lines lies in the file."""
    head, where = plane_fields(path, frame)
    return decoded(path, frame, pb().XPlane, head), where


def decoded(path: Path, frame: Frame, message: Any, data: bytes) -> Any:
    try:
        return message.FromString(data)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError has no stable home
        raise InputError(path, f"byte {frame.at}", f"an XSpace plane protobuf cannot decode ({e})") from None


@functools.cache
def line_frames() -> Any:
    """XLine's wire form with its events left as bytes: protobuf splits a line into its events in
    C, where a walk of each event's key and length in Python was a third of a read's CPU (and
    bytes and a message have one wire form, so a batch of them decodes as an XLine)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="xline_frames.proto", package="trace2perfetto",
                                              syntax="proto3")
    line = file.message_type.add(name="XLineFrames")
    for name, number, kind in (("id", 1, field.TYPE_INT64), ("display_id", 10, field.TYPE_INT64),
                               ("name", 2, field.TYPE_STRING), ("display_name", 11, field.TYPE_STRING),
                               ("timestamp_ns", 3, field.TYPE_INT64), ("duration_ps", 9, field.TYPE_INT64)):
        line.field.add(name=name, number=number, type=kind, label=field.LABEL_OPTIONAL)
    line.field.add(name="events", number=_EVENTS, type=field.TYPE_BYTES, label=field.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()  # private, as xplane_pb2's
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("trace2perfetto.XLineFrames"))


def _fields(data: BinaryIO, end: int, path: Path, at: int = 0) -> Iterator[tuple[int, int, int, int]]:
    """A message's fields from ``at`` to ``end`` of a file: (number, where the field's key begins,
    where its value begins, where it ends), found by the wire format alone."""
    read = _byte_reader(data, at)
    while (start := read.at) < end:
        key = read.varint()
        number, kind = key >> 3, key & 7
        if kind == 0:
            read.varint()
            yield number, start, read.at, read.at
        elif kind == 2:
            length = read.varint()
            value = read.at
            read.skip(length)
            yield number, start, value, value + length
        elif kind in (1, 5):
            read.skip(8 if kind == 1 else 4)
            yield number, start, read.at, read.at
        else:
            raise InputError(path, f"byte {start}", f"not an XSpace protobuf (wire type {kind} in a plane)")
        if read.at > end:
            raise cut(path, end, "inside a plane's field")


class _byte_reader:
    """Varints and skips over a file, by seeks and small reads."""

    def __init__(self, data: BinaryIO, at: int) -> None:
        self.data, self.at = data, at
        data.seek(at)

    def varint(self) -> int:
        value, shift = 0, 0
        while True:
            got = self.data.read(1)
            if not got:
                raise InputError(Path(getattr(self.data, "name", "")), f"byte {self.at}",
                                 "not an XSpace protobuf (a field runs past its message)")
            self.at += 1
            value |= (got[0] & 0x7F) << shift
            if got[0] < 0x80:
                return value
            shift += 7

    def skip(self, n: int) -> None:
        self.at += n
        self.data.seek(self.at)


def plane_fields(path: Path, frame: Frame) -> tuple[bytes, list[Frame]]:
    """A plane's fields but its lines, as bytes (protobuf decodes fields in any order), and where
    each line lies in the file: the lines are read one at a time (``lines``)."""
    return _walked(path, frame, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=4)  # a plane's head is wanted for a rank's read, then for its events
def _walked(path: Path, frame: Frame, _modified: int) -> tuple[bytes, list[Frame]]:
    head: list[bytes] = []
    lines: list[Frame] = []
    with path.open("rb") as f:
        for number, start, value, end in list(_fields(f, frame.at + frame.size, path, frame.at)):
            if number == _LINES:
                lines.append(Frame(number, value, end - value))
            else:
                f.seek(start)
                head.append(f.read(end - start))
    return b"".join(head), lines


def lines(path: Path, frame: Frame, where: list[Frame]) -> Iterator[tuple[Any, Any]]:
    """The plane's lines in order, each as its own fields (an XLineFrames without events) with
    batches of up to ``EVENT_BATCH`` of its events' bytes: memory holds a piece of a line at a
    time (``_pieces``), never the plane nor a whole line."""
    frames = line_frames()
    for at in where:
        try:
            head = decoded(path, frame, frames, b"".join(wire for _, wire in _pieces(path, at)))  # but events
        except _Refused:  # protobuf's, whole: it decodes the line, or says what is wrong with it
            line = decoded(path, frame, frames, read_frame(path, at))
            events = list(line.events)
            line.ClearField("events")
            yield from ((line, events[i:i + EVENT_BATCH])
                        for i in range(0, max(len(events), 1), EVENT_BATCH))
            continue
        batches = 0
        for events, _ in _pieces(path, at):
            if events:
                batches += 1
                yield head, events
        if not batches:
            yield head, []


class _Refused(Exception):
    """A line's wire that C leaves to protobuf (``_core.line_fields``), or a field past its line."""


def _pieces(path: Path, line: Frame) -> Iterator[tuple[list[bytes], bytes]]:
    """A line's fields read ``_PIECE`` bytes at a time: batches of ``EVENT_BATCH`` events' bytes (the
    last one fewer), each with the wire of the other fields met since the batch before
    (``_core.line_fields``)."""
    with path.open("rb") as f:
        f.seek(line.at)
        left, piece, at, events, wire = line.size, b"", 0, [], []
        while True:
            found = line_fields(piece, at, EVENT_BATCH - len(events))
            if found is None:
                raise _Refused
            events += found[0]
            wire.append(found[1])
            at = found[2]
            if len(events) == EVENT_BATCH:  # the piece may hold more
                yield events, b"".join(wire)
                events, wire = [], []
                continue
            if not left:  # taken up to its end, or to a field that runs past the line
                if at < len(piece):
                    raise _Refused
                if events or any(wire):
                    yield events, b"".join(wire)
                return
            more = f.read(min(_PIECE, left))
            left = left - len(more) if more else 0
            piece, at = piece[at:] + more, 0


def plane_name(path: Path, frame: Frame) -> str:
    """A plane's name from its first bytes (id, then name: protobuf writes fields in order)."""
    name = _leading_name(path, frame)
    return plane(path, frame).name if name is None else name


def line_name(path: Path, frame: Frame) -> str:
    """A line's name from its first bytes, as a plane's (an XLine's id and name are fields 1, 2)."""
    name = _leading_name(path, frame)
    return decoded(path, frame, line_frames(), read_frame(path, frame)).name if name is None else name


def _leading_name(path: Path, frame: Frame) -> str | None:
    """The name (field 2) of a message whose id (field 1) alone may precede it; None where it is
    not in the first ``_PEEK`` bytes: the caller decodes the message."""
    head = read_frame(path, frame._replace(size=min(frame.size, _PEEK)))
    at = 0
    while at < len(head):
        key, at = _decode_varint(head, at)
        if key == (2 << 3 | 2):
            length, at = _decode_varint(head, at)
            if at + length <= len(head):
                return head[at:at + length].decode("utf-8", "replace")
            break
        if key & 7 != 0:  # a field other than the id before the name
            break
        _, at = _decode_varint(head, at)
    return None


def _decode_varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while at < len(data):
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    return value, len(data) + 1  # ran off the peek: the caller decodes the plane
