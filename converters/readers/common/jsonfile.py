"""Loading Chrome-trace JSON as the profilers write them, including cut-off and gzipped ones.

A job killed mid-write leaves ``[{...}, {...}, {"na`` behind. Such a file converts up to its
last whole event, with a warning naming the file and the byte offset where it was cut. Both
forms stream: a plain array of events, and an object whose ``traceEvents`` array lies between
other keys (PyTorch's Kineto and Paddle write that; ``header`` reads the keys before it,
``trailer`` those after it). Files ending ``.gz`` are inflated as they are read (byte offsets
are then the inflated ones).

Memory stays flat on any input, valid or hostile: whitespace of any length between events is
passed over, an event longer than ``MAX_EVENT_BYTES`` (a string or number of gigabytes, which no
profiler writes) is left out with a warning naming its byte offset (``_Stretch``), and what must
be read whole (a small file, events that cannot be streamed) is refused past ``WHOLE_LIMIT``.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from ...errors import Diagnostics, InputError

_MAX_RECOVERY_TRIES = 64  # closing braces to try from the end; an event nests only a few deep
WHOLE_LIMIT = 256 << 20  # the most read whole: a small file, or events that cannot be streamed


def load_object(path: Path) -> dict[str, Any]:
    """A small JSON file holding one object (profiler_info, info.json, start_info, ...).

    Raises:
        InputError: the file cannot be read, is not JSON, or holds no object.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(WHOLE_LIMIT + 1)
        if len(data) > WHOLE_LIMIT:  # no profiler's small file is that long: memory stays bounded
            raise InputError(path, "", f"expected a small JSON object; this file is over "
                             f"{WHOLE_LIMIT >> 20} MiB")
        value = orjson.loads(data)
    except (OSError, orjson.JSONDecodeError) as e:
        raise InputError(path, "", f"cannot read JSON: {e}") from e
    if not isinstance(value, dict):
        raise InputError(path, "top level", "expected a JSON object")
    return value


def integer(value: Any, path: Path, key: str) -> int:
    """A value of a small JSON file that must be an integer: a number, or the text of one (the
    profilers write both).

    Raises:
        InputError: it is none, naming the file and the key.
    """
    try:
        if type(value) is int or type(value) is str or (type(value) is float and value.is_integer()):
            return int(value)
    except ValueError:
        pass
    raise InputError(path, key, f"expected an integer, got {value!r:.40}")


def load_events(path: Path, diag: Diagnostics) -> list[Any]:
    """The events of a Chrome-trace file: a JSON array, or an object with ``traceEvents``.

    Raises:
        InputError: the file cannot be read, or is not JSON even when cut at a whole event.
    """
    try:
        with open_bytes(path, diag) as f:
            data = f.read(WHOLE_LIMIT + 1)
    except OSError as e:
        raise InputError(path, "", f"cannot read: {e.strerror or e}") from e
    if len(data) > WHOLE_LIMIT:  # read whole only where it cannot be streamed: a bounded size
        raise InputError(path, "", f"expected a JSON array of trace events, or an object whose traceEvents "
                         f"begin within its first {_HEADER_CHUNKS * 2} MiB; this one is over "
                         f"{WHOLE_LIMIT >> 20} MiB, too big to read whole")
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        value = _recover_truncated(path, data, e, diag)
    if isinstance(value, dict) and isinstance(value.get("traceEvents"), list):
        value = value["traceEvents"]
    if not isinstance(value, list):
        raise InputError(path, "top level", "expected a JSON array of trace events")
    return value


def _recover_truncated(path: Path, data: bytes, error: orjson.JSONDecodeError, diag: Diagnostics,
                       at: int = 0, before: int = 0) -> Any:
    """Cut ``data`` after its last whole event and close the array, or raise InputError.

    Only a file that ends too early is cut off; a parse error before its end is garbage. ``data``
    may be the file's tail: it starts at byte ``at``, after ``before`` events (for the warning).
    """
    stripped = data.lstrip()
    if not stripped:
        raise InputError(path, "byte 0", "empty file, expected a JSON array of trace events")
    whole = _without_partial_character(data)
    if len(whole) < len(data):  # cut inside a UTF-8 character: orjson rejects all of it
        try:
            return _recover_truncated(path, whole, _error(whole), diag, at, before)
        except InputError:
            raise InputError(path, f"byte {len(whole)}", "not valid UTF-8") from None
    text = data.decode("utf-8", "replace")  # orjson counts characters, not bytes
    if stripped[:1] != b"[" or error.pos < len(text.rstrip()):
        where = len(text[: error.pos].encode("utf-8", "replace"))
        raise InputError(path, f"byte {where}", f"not valid JSON ({error.msg})")
    end, value = len(data), []
    for _ in range(_MAX_RECOVERY_TRIES):
        end = data.rfind(b"}", 0, end)
        if end < 0:
            break
        try:
            value = orjson.loads(data[: end + 1] + b"]")
            break
        except orjson.JSONDecodeError:
            continue
    diag.warn(
        "truncated_file",
        f"{path}: cut off at byte {at + len(data)}; converted the {before + len(value)} whole events "
        "before it",
    )
    return value


def _without_partial_character(data: bytes) -> bytes:
    """``data`` without a UTF-8 character cut off at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data
        if byte >= 0xC0:  # a leading byte: how long its character should be
            length = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data[:-back] if length > back else data
    return data


def _error(data: bytes) -> orjson.JSONDecodeError:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError as e:
        return e
    return orjson.JSONDecodeError("unexpected end of data", "", len(data))


_SPLIT = re.compile(rb"\}[ \t\n\r]*,[ \t\n\r]*\{")  # likely the boundary between two events
_TAIL = 1 << 16  # how far back from the end of the buffer to look for boundaries
_TRIES = 8


def iter_batches(
    path: Path, diag: Diagnostics, decode: Callable[[bytes], list[Any]], chunk_bytes: int = 2 << 20
) -> Iterator[list[Any]]:
    """The events of a JSON-array file in batches, reading ``chunk_bytes`` at a time.

    A profiler's array of events is often hundreds of MB on one line; this holds about one
    chunk. Each chunk is cut after the last event that ends in it (found by a regex and
    confirmed by ``decode`` succeeding on it, so a ``}, {`` inside a string cannot fool it)
    and decoded in one call. A file cut off by a crash yields its whole events, the last
    batch recovered by :func:`load_events`'s rules on the tail alone, with the same warning.
    An object is streamed the same way from its ``traceEvents`` array on; one whose array does
    not start in its first chunks is read whole. Batches are lists of what ``decode`` returns, or
    of plain dicts where recovered.

    Raises:
        InputError: the file cannot be read, or is not valid JSON where it is not cut off.
    """
    try:
        yield from _split_array(path, diag, decode, chunk_bytes)
    except _NotPlain:
        yield load_events(path, diag)
    except OSError as e:
        raise InputError(path, "", f"cannot read: {e.strerror or e}") from e


class _NotPlain(Exception):
    pass


def _split_array(
    path: Path, diag: Diagnostics, decode: Callable[[bytes], list[Any]], chunk_bytes: int
) -> Iterator[list[Any]]:
    with open_bytes(path, diag) as f:
        buf, skipped = _past_space(f, chunk_bytes)
        start = len(buf) - len(buf.lstrip())
        in_object = buf[start : start + 1] == b"{"
        if in_object:
            found = _events_key(f, buf, chunk_bytes)
            if found is None:
                raise _NotPlain
            buf, start = found
        elif buf[start : start + 1] != b"[":
            raise _NotPlain
        base, buf = skipped + start + 1, buf[start + 1 :]  # base: where buf starts in the file
        count = 0  # the events yielded
        while True:
            more = f.read(chunk_bytes)
            if not more:
                buf = _array_of_object(buf, decode) if in_object else buf
                yield _tail(path, diag, decode, buf, base, count)
                return
            # the last _TAIL bytes, where the boundary is looked for, all in ``more``: the batch is
            # joined from buf and more, not from their concatenation (one copy of a chunk, not two)
            head, tail = (buf, more) if len(more) >= _TAIL else (b"", buf + more)
            for match in list(_SPLIT.finditer(tail, max(0, len(tail) - _TAIL)))[::-1][:_TRIES]:
                batch = b"".join((b"[", head, memoryview(tail)[: match.start() + 1], b"]"))
                try:
                    events = decode(_utf8(path, batch, base - 1, diag))
                except ValueError:
                    continue
                count += len(events)
                yield events
                base += len(head) + match.end() - 1
                buf = tail[match.end() - 1 :]
                break
            else:
                buf = head + tail
                if len(buf) > _LONG * chunk_bytes:  # no event ends in a long stretch: broken, or huge
                    _raise_if_broken(path, buf, base, in_object)
                    stretch = _Stretch(f, path, diag, chunk_bytes)
                    events, buf, base, ended = stretch.read(buf, base, count)
                    events = stretch.decoded(events, decode)
                    count += len(events)
                    yield events
                    if ended:
                        return


def _past_space(f: BinaryIO, chunk_bytes: int) -> tuple[bytes, int]:
    """The first chunk that holds more than whitespace, and how many bytes of it came before."""
    skipped = 0
    while (buf := f.read(chunk_bytes)) and not buf.strip():
        skipped += len(buf)
    return buf, skipped


_LONG = 4  # chunks without a boundary between events: a long stretch, read by _Stretch
MAX_EVENT_BYTES = 16 << 20  # an event longer than this (a name, a number that long) is left out
_STRUCTURE = re.compile(rb'[{}\[\]"]')


class _Stretch:
    """A stretch of an event array where no boundary between events came for several chunks:
    whitespace between events (any amount: valid JSON), or an event too long to hold (a string or
    number of gigabytes, which no profiler writes). Read by its structure, a chunk at a time, so
    memory holds a chunk and the events kept, never the stretch: whitespace between events is
    passed over; an event past ``MAX_EVENT_BYTES`` is left out with a warning naming the file
    and its byte offset; the rest is each event's own bytes."""

    def __init__(self, f: BinaryIO, path: Path, diag: Diagnostics, chunk_bytes: int) -> None:
        self._f, self._path, self._diag, self._chunk = f, path, diag, chunk_bytes
        self._at: list[int] = []  # where each event kept begins in the file

    def read(self, buf: bytes, base: int, before: int) -> tuple[list[bytes], bytes, int, bool]:
        """The whole events from ``buf`` (at byte ``base``, between events) on: those ``buf`` holds
        and the one it ends in; then the rest of the buffer from the next event's start, where
        that lies, and whether the array (or the file) has ended there. ``before``: the events
        read before it (for the warning of a file cut off)."""
        data, offset, pos, end = buf, base, 0, base + len(buf)
        texts: list[bytes] = []
        parts: list[bytes] | None = []  # the event's bytes of the chunks before; None: too long, left out
        depth, size, start, in_string, done = 0, 0, 0, False, 0
        while True:
            if pos >= len(data):
                if depth and parts is not None:
                    parts.append(data[start:])
                    size += len(data) - start
                    if size > MAX_EVENT_BYTES:
                        parts = None
                pos, start, offset = pos - len(data), 0, offset + len(data)  # past an escape's second byte
                data = self._f.read(self._chunk)
                if not data:
                    if depth:
                        self._at.pop()  # the event cut off
                    self._diag.warn("truncated_file", f"{self._path}: cut off at byte {offset}; converted "
                                    f"the {before + len(texts)} whole events before it")
                    return texts, b"", offset, True
                continue
            if in_string:  # memchr, not a regex: a string may be gigabytes long
                quote = data.find(b'"', pos)
                escape = data.find(b"\\", pos, len(data) if quote < 0 else quote)
                if escape >= 0:  # a backslash: the next byte is escaped
                    pos = escape + 2
                elif quote < 0:
                    pos = len(data)
                else:
                    in_string, pos = False, quote + 1
                continue
            if not depth:
                was, pos = pos, len(data) - len(data[pos:].lstrip())  # whitespace of any length, at C speed
                for other in (b"\x0b", b"\x0c"):  # ASCII's whitespace, not JSON's
                    if (bad := data.find(other, was, pos)) >= 0:
                        raise InputError(self._path, f"byte {offset + bad}", "not valid JSON (a control "
                                         "character between events)")
                if pos == len(data):
                    continue
                byte = data[pos]
                if byte == 0x2C:  # ","
                    pos += 1
                elif byte == 0x5D:  # "]": the array ends
                    return texts, data[pos:], offset + pos, True
                elif byte != 0x7B:
                    raise InputError(self._path, f"byte {offset + pos}", "not valid JSON (expected an event, "
                                     "\",\" or \"]\")")
                elif done and offset + pos >= end:  # past what was buffered: back to batches
                    return texts, data[pos:], offset + pos, False
                else:
                    depth, size, start, parts, pos = 1, 0, pos, [], pos + 1
                    self._at.append(offset + start)
                continue
            found = _STRUCTURE.search(data, pos)
            if found is None:
                pos = len(data)
                continue
            pos, byte = found.end(), data[found.start()]
            if byte == 0x22:
                in_string = True
            elif byte in b"{[":
                depth += 1
            elif (depth := depth - 1) == 0:
                done += 1
                if parts is None:
                    self._diag.warn("long_event", f"{self._path}: byte {self._at.pop()}: an event of more "
                                    f"than {MAX_EVENT_BYTES >> 20} MiB (a string or number that long, which "
                                    "no profiler writes); left out")
                else:
                    texts.append(b"".join((*parts, data[start:pos])))

    def decoded(self, texts: list[bytes], decode: Callable[[bytes], list[Any]]) -> list[Any]:
        """The events kept, decoded in one call (one by one where that fails, to name the bad one)."""
        if not texts:
            return []
        try:
            joined = b"".join((b"[", b",".join(texts), b"]"))
            return decode(_utf8(self._path, joined, self._at[0], self._diag))
        except ValueError:
            pass
        for text, at in zip(texts, self._at, strict=True):
            try:
                decode(b"[" + text + b"]")
            except ValueError:
                error = _error(b"[" + text + b"]")
                raise InputError(self._path, f"byte {at + max(error.pos - 1, 0)}",
                                 f"not valid JSON ({error.msg})") from None
        return decode(b"[" + b",".join(texts) + b"]")


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_HEADER_CHUNKS = 8  # an object's traceEvents must start within this many chunks to be streamed


def _events_key(f: BinaryIO, buf: bytes, chunk_bytes: int) -> tuple[bytes, int] | None:
    """The start of an object's ``traceEvents`` array: the bytes read so far and where its
    ``[`` lies in them, reading on a few chunks; None if it does not come soon."""
    for _ in range(_HEADER_CHUNKS):
        found = _EVENTS_KEY.search(buf)
        if found:
            return buf, found.end() - 1
        more = f.read(chunk_bytes)
        if not more:
            return None
        buf += more
    return None


def _array_of_object(buf: bytes, decode: Callable[[bytes], list[Any]]) -> bytes:
    """The end of an object's event array without the keys after it (``], "traceName": ...}``):
    cut at the last ``]`` that closes the array (what comes before decodes as events) and that
    the rest of a JSON object follows. Unchanged if none does (the file was cut off in the array)."""
    end, tries = len(buf), 0
    while tries < _MAX_RECOVERY_TRIES:
        end = buf.rfind(b"]", 0, end)
        if end < 0:
            break
        last = _last_non_space(buf, end)  # not buf[:end].rstrip(): a copy per "]", a million of them nested
        if last >= 0 and buf[last] != 0x7D:  # the array ends after an event ("}"), or is empty
            continue
        tries += 1
        rest = buf[end + 1 :].strip()
        try:
            if rest != b"}" and not (rest[:1] == b"," and isinstance(orjson.loads(b"{" + rest[1:]), dict)):
                continue
            decode(b"[" + buf[: end + 1])
            return buf[: end + 1]
        except (orjson.JSONDecodeError, ValueError):
            continue
    return buf


def _last_non_space(buf: bytes, end: int) -> int:
    """Where the last byte before ``end`` that is no JSON whitespace lies; -1 if none."""
    at = end - 1
    while at >= 0 and buf[at] in b" \t\r\n":
        at -= 1
    return at


def header(path: Path, limit: int = 1 << 20) -> dict[str, Any]:
    """The keys of an object-form trace that come before its ``traceEvents`` (Kineto writes
    ``distributedInfo`` and ``baseTimeNanoseconds`` there), read from its first ``limit`` bytes
    only; {} for an array, or where nothing can be read.
    """
    return header_of(first_bytes(path, limit))


def trailer(path: Path, limit: int = 1 << 20) -> dict[str, Any]:
    """The keys of an object-form trace that come after its ``traceEvents`` array (Kineto of
    PyTorch 2.1-2.5 writes ``baseTimeNanoseconds`` there; a harness that rewrites the file may put
    any key there), read from its last ``limit`` bytes; {} where none can be read. Streamed: a
    ``.gz`` is inflated to its end in chunks, holding only the last ``limit`` bytes."""
    return trailer_of(last_bytes(path, limit))


def last_bytes(path: Path, limit: int) -> bytes:
    """The last ``limit`` bytes of the file (inflated), or b"" if it cannot be read."""
    try:
        with open(path, "rb") as raw:
            if not path.name.endswith(".gz"):
                size = raw.seek(0, 2)
                raw.seek(max(0, size - limit))
                return raw.read(limit)
        window = b""
        with open_bytes(path) as f:
            while part := f.read(max(limit, 1 << 20)):
                window = (window + part)[-limit:]
        return window
    except (OSError, InputError):
        return b""


_TRAILER_TRIES = 64  # "]" that close no array of events, tried before the earliest one that does


def trailer_of(data: bytes) -> dict[str, Any]:
    """``trailer`` of the last bytes of a file: what follows the ``]`` that ends the events, the
    earliest ``]`` after which the rest of the data is the rest of an object (a ``]`` in a later
    key's value, ``deviceProperties``' own, is followed by such a rest too)."""
    found: dict[str, Any] = {}
    end, misses = len(data), 0
    while misses < _TRAILER_TRIES:
        end = data.rfind(b"]", 0, end)
        if end < 0:
            break
        rest = data[end + 1 :].strip()
        last = _last_non_space(data, end)
        value: Any = None
        if (last < 0 or data[last] in b"}[") and rest[:1] == b",":
            try:
                value = orjson.loads(b"{" + rest[1:])
            except orjson.JSONDecodeError:
                pass
        if isinstance(value, dict):
            found, misses = value, 0
        else:
            misses += 1
    return found


def first_bytes(path: Path, limit: int) -> bytes:
    """The first ``limit`` bytes of the file (inflated), or b"" if it cannot be read."""
    try:
        with open_bytes(path) as f:
            return f.read(limit)
    except (OSError, InputError):
        return b""


def events_key(data: bytes) -> int | None:
    """Where the events of an object-form trace begin in its first bytes (after its
    ``"traceEvents": [``); None for an array, or where they do not begin in ``data``."""
    found = _EVENTS_KEY.search(data)
    return found.end() if found and data.lstrip()[:1] == b"{" else None


def header_of(data: bytes) -> dict[str, Any]:
    """``header`` of the first bytes of a file."""
    found = _EVENTS_KEY.search(data)
    if data.lstrip()[:1] != b"{" or not found:
        return {}
    text = data[: found.start()].rstrip()
    try:
        value = orjson.loads(text[:-1] + b"}" if text.endswith(b",") else text + b"}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def open_bytes(path: Path, diag: Diagnostics | None = None) -> BinaryIO:
    """The file's bytes, inflated if its name ends ``.gz``."""
    f = open(path, "rb")
    return _Gunzip(f, path, diag) if path.name.endswith(".gz") else f


class _Gunzip:
    """A gzip file's bytes as they inflate, never more than asked for at a time. Unlike
    ``gzip.open`` it gives every byte of a stream cut off by a crash (then warns), and names the
    file and position of corrupt data."""

    def __init__(self, raw: BinaryIO, path: Path, diag: Diagnostics | None) -> None:
        self._raw, self._path, self._diag = raw, path, diag
        self._inflate = zlib.decompressobj(31)

    def read(self, size: int = -1) -> bytes:
        parts, have = [], 0
        while size < 0 or have < size:
            part = self._inflated(0 if size < 0 else size - have)
            if not part:
                break
            parts.append(part)
            have += len(part)
        return b"".join(parts)

    def _inflated(self, limit: int) -> bytes:
        """Up to ``limit`` (0: any number of) inflated bytes; b"" at the end of the file."""
        while True:
            if self._inflate.eof:  # a member has ended: another may follow, from its unused data on
                # (its unconsumed_tail may still hold those bytes too: fed again, it would never end)
                data = self._inflate.unused_data or self._raw.read(_RAW_CHUNK)
                if not data:
                    return b""
                self._inflate = zlib.decompressobj(31)
            else:
                data = self._inflate.unconsumed_tail or self._raw.read(_RAW_CHUNK)
                if not data:
                    self._say_cut()
                    return b""
            try:
                out = self._inflate.decompress(data, limit)
            except zlib.error as e:
                raise InputError(self._path, f"byte {self._raw.tell()} of the gzip file",
                                 f"not valid gzip data ({e})") from None
            if out:
                return out

    def _say_cut(self) -> None:
        if self._diag is not None and self._raw.tell():
            self._diag.warn("truncated_file", f"{self._path}: the gzip stream is cut off at byte "
                            f"{self._raw.tell()}; read what it holds")
            self._diag = None  # said once

    def __enter__(self) -> _Gunzip:
        return self

    def __exit__(self, *_: object) -> None:
        self._raw.close()


_RAW_CHUNK = 1 << 18


def _tail(path: Path, diag: Diagnostics, decode: Callable[[bytes], list[Any]], buf: bytes, base: int,
          before: int) -> list:
    """The last events of the file: ``buf`` holds them and the closing bracket, or was cut off."""
    whole = _without_partial_character(buf)
    buf = _utf8(path, whole, base, diag) + buf[len(whole):]
    try:
        return decode(b"[" + buf)
    except ValueError:
        pass
    data = b"[" + buf
    error = _error(data)
    try:
        return _recover_truncated(path, data, error, diag, base - 1, before)
    except InputError as e:
        if not e.where.startswith("byte "):
            raise
        raise InputError(path, f"byte {base - 1 + int(e.where[5:])}", e.reason) from None


def _utf8(path: Path, data: bytes, base: int, diag: Diagnostics) -> bytes:
    """``data``, with any bytes that are not UTF-8 (a name from a mis-encoded source) replaced.

    The decoders check strings but not the raw ``args`` kept undecoded, and a writer must never
    pass bytes on that make its own output invalid.
    """
    if data.isascii():  # what profilers write: checked without decoding
        return data
    try:
        data.decode("utf-8")
        return data
    except UnicodeDecodeError as e:
        diag.warn("not_utf8", f"{path}: byte {base + e.start}: bytes that are not UTF-8; replaced by U+FFFD")
        return data.decode("utf-8", "replace").encode("utf-8")


def _raise_if_broken(path: Path, buf: bytes, base: int, in_object: bool = False) -> None:
    buf = _without_partial_character(buf)  # a chunk may end inside a character
    text = buf.decode("utf-8", "replace")
    error = _error(b"[" + buf)
    if in_object and "after document" in error.msg:  # the array has ended: the object's other keys follow
        return
    if error.pos - 1 < len(text.rstrip()):  # it fails before the data runs out: garbage
        at = len(text[: max(error.pos - 1, 0)].encode("utf-8", "replace"))  # chars to bytes
        raise InputError(path, f"byte {base + at}", f"not valid JSON ({error.msg})")
