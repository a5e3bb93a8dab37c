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


def load_object(path: Path) -> dict[str, Any]:
    """A small JSON file holding one object (profiler_info, info.json, start_info, ...).

    Raises:
        InputError: the file cannot be read, is not JSON, or holds no object.
    """
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        raise InputError(path, "", f"cannot read JSON: {e}") from e
    if not isinstance(value, dict):
        raise InputError(path, "top level", "expected a JSON object")
    return value


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

    A profiler's array of events is often hundreds of MB on one line; this holds about one
    chunk. Each chunk is cut after the last event that ends in it (found by a regex and
    confirmed by ``decode`` succeeding on it, so a ``}, {`` inside a string cannot fool it)
    and decoded in one call. A file cut off by a crash yields its whole events, the last
    batch recovered by :func:`load_events`'s rules on the tail alone, with the same warning.
    Only a file that is not a plain array (an object with ``traceEvents``) is read whole.
    Batches are lists of what ``decode`` returns, or of plain dicts where recovered.

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
    with open(path, "rb") as f:
        buf = f.read(chunk_bytes)
        start = len(buf) - len(buf.lstrip())
        if buf[start : start + 1] != b"[":
            raise _NotPlain
        base, buf = start + 1, buf[start + 1 :]  # base: where buf starts in the file
        check_at = 8 * chunk_bytes
        while True:
            more = f.read(chunk_bytes)
            if not more:
                yield _tail(path, diag, decode, buf, base)
                return
            buf += more
            for match in list(_SPLIT.finditer(buf, max(0, len(buf) - _TAIL)))[::-1][:_TRIES]:
                piece = _utf8(path, buf[: match.start() + 1], base, diag)
                try:
                    events = decode(b"[" + piece + b"]")
                except ValueError:
                    continue
                yield events
                base += match.end() - 1
                buf = buf[match.end() - 1 :]
                break
            else:
                if len(buf) > check_at:  # no event ends in a long stretch: broken, or one huge event
                    _raise_if_broken(path, buf, base)
                    check_at *= 2


def _tail(path: Path, diag: Diagnostics, decode: Callable[[bytes], list[Any]], buf: bytes, base: int) -> list:
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
        return _recover_truncated(path, data, error, diag)
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


def _raise_if_broken(path: Path, buf: bytes, base: int) -> None:
    buf = _without_partial_character(buf)  # a chunk may end inside a character
    text = buf.decode("utf-8", "replace")
    error = _error(b"[" + buf)
    if error.pos - 1 < len(text.rstrip()):  # it fails before the data runs out: garbage
        at = len(text[: max(error.pos - 1, 0)].encode("utf-8", "replace"))  # chars to bytes
        raise InputError(path, f"byte {base + at}", f"not valid JSON ({error.msg})")
