"""Loading Chrome-trace JSON arrays as the profilers write them, including cut-off ones.

A job killed mid-write leaves ``[{...}, {...}, {"na`` behind. Such a file converts up to its
last whole event, with a warning naming the file and the byte offset where it was cut.
"""

from __future__ import annotations

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
    """Cut ``data`` after its last whole event and close the array, or raise InputError."""
    stripped = data.lstrip()
    if not stripped:
        raise InputError(path, "byte 0", "empty file, expected a JSON array of trace events")
    if stripped[:1] == b"[":
        end = len(data)
        for _ in range(_MAX_RECOVERY_TRIES):
            end = data.rfind(b"}", 0, end)
            if end < 0:
                break
            try:
                value = orjson.loads(data[: end + 1] + b"]")
            except orjson.JSONDecodeError:
                continue
            diag.warn(
                "truncated_file",
                f"{path}: cut off at byte {len(data)}; converted the {len(value)} whole events "
                f"before byte {end + 1}",
            )
            return value
    raise InputError(path, f"byte {error.pos}", f"not valid JSON ({error.msg})")
