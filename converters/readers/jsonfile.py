"""Loading Chrome-trace JSON arrays as the profilers write them, including cut-off ones.

A job killed mid-write leaves ``[{...}, {...}, {"na`` behind. Such a file converts up to its
last whole event, with a warning naming the file and the byte offset where it was cut.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from ..errors import Diagnostics, InputError

_MAX_RECOVERY_TRIES = 64  # closing braces to try from the end; an event nests only a few deep


def load_events(path: Path, diag: Diagnostics) -> list[Any]:
    """The events of a Chrome-trace file: a JSON array, or an object with ``traceEvents``.

    Raises:
        InputError: the file cannot be read, or is not JSON even when cut at a whole event.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(path, "", f"cannot read: {e.strerror or e}") from e
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        value = _recover_truncated(path, data, e, diag)
    if isinstance(value, dict) and isinstance(value.get("traceEvents"), list):
        value = value["traceEvents"]
    if not isinstance(value, list):
        raise InputError(path, "top level", "expected a JSON array of trace events")
    return value


def _recover_truncated(path: Path, data: bytes, error: orjson.JSONDecodeError, diag: Diagnostics) -> Any:
    """Cut ``data`` after its last whole event and close the array, or raise InputError.

    Only a file that ends too early is cut off; a parse error before its end is garbage.
    """
    stripped = data.lstrip()
    if not stripped:
        raise InputError(path, "byte 0", "empty file, expected a JSON array of trace events")
    whole = _without_partial_character(data)
    if len(whole) < len(data):  # cut inside a UTF-8 character: orjson rejects all of it
        try:
            return _recover_truncated(path, whole, _error(whole), diag)
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
        f"{path}: cut off at byte {len(data)}; converted the {len(value)} whole events before it",
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

    A profiler's array of events is often hundreds of MB on one line; this holds one chunk. Each
    chunk is cut after the last event that ends in it (found by a regex and confirmed by
    ``decode`` succeeding on it, so a ``}, {`` inside a string cannot fool it) and decoded in
    one call. A file this cannot split (not a plain array of objects, cut off, broken) is read
    by :func:`load_events`, which recovers or explains; its events are decoded with ``decode``
    too, and those already yielded are skipped.

    Raises:
        InputError: as :func:`load_events`.
    """
    done = 0
    try:
        for batch in _split_array(path, decode, chunk_bytes):
            done += len(batch)
            yield batch
        return
    except (_NotPlain, ValueError):  # msgspec's and orjson's decode errors are ValueErrors
        pass
    except OSError as e:
        raise InputError(path, "", f"cannot read: {e.strerror or e}") from e
    events = load_events(path, diag)
    yield events[done:]


class _NotPlain(Exception):
    pass


def _split_array(path: Path, decode: Callable[[bytes], list[Any]], chunk_bytes: int) -> Iterator[list[Any]]:
    with open(path, "rb") as f:
        buf = f.read(chunk_bytes).lstrip()
        if buf[:1] != b"[":
            raise _NotPlain
        buf = buf[1:]
        while True:
            more = f.read(chunk_bytes)
            if not more:
                yield decode(b"[" + buf)  # the rest, closing bracket included
                return
            buf += more
            for match in list(_SPLIT.finditer(buf, max(0, len(buf) - _TAIL)))[::-1][:_TRIES]:
                try:
                    events = decode(b"[" + buf[: match.start() + 1] + b"]")
                except ValueError:
                    continue
                yield events
                buf = buf[match.end() - 1 :]
                break
