"""Where every command's output file goes: it appears only when complete, and never over an input.

Both file-writing commands (``convert`` and ``report``) open their output here and nowhere else.
An output that names an input (the same file, also through a symlink or a hard link) or lies inside
an input folder is a usage error before anything is written: a profiler's file replaced by its own
conversion is data lost, and a file added inside a profile would be read as part of it next time.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import BinaryIO

from .errors import Trace2PerfettoError, UsageError
from .model import RankInfo


class Format(str, Enum):
    """What ``convert`` writes (here, not in the pipeline, so the CLI names it without loading the
    writers)."""

    PERFETTO = "perfetto"
    JSON = "json"


def inputs_of(path: str | os.PathLike[str], infos: Iterable[RankInfo]) -> list[Path]:
    """What a command reads: the profile it was given (a file, or a folder and all it holds) and
    every file or folder a rank is read from."""
    found = [Path(path)]
    for info in infos:
        found += [*info.source_paths, *info.host_paths]
    return found


def refuse_inputs(target: str, inputs: Iterable[str | os.PathLike[str]]) -> None:
    """Raise UsageError if writing ``target`` would write over an input or into an input folder.

    Files are compared by device and inode, so a symlink or a hard link to an input is the input;
    the folder ``target`` lands in (symlinks resolved) and each one above it likewise, so no path
    spelling gets around it.
    """
    if target == "-":
        return
    files: dict[tuple[int, int], str] = {}
    folders: dict[tuple[int, int], str] = {}
    for path in inputs:
        found = _identity(path)
        if found is not None:
            (folders if found[0] else files)[found[1]] = str(path)
    final = Path(target)
    own = _identity(final)
    if own is not None and own[1] in files:
        raise UsageError(f"{target}: the output would replace the input {files[own[1]]}; nothing written "
                         "(give -o another name)")
    if own is not None and own[0]:
        raise UsageError(f"{target}: is a folder; give -o a file name")
    folder = Path(os.path.realpath(final.parent))  # through symlinked folders to where it would land
    for above in (folder, *folder.parents):
        found = _identity(above)
        if found is not None and found[1] in folders:
            raise UsageError(f"{target}: the output would go inside the input folder {folders[found[1]]}; "
                             "nothing written (write it beside the profile, not into it)")


def _is_stream(target: str) -> bool:
    """Whether ``target`` exists and is no regular file (nor folder): a device or a pipe."""
    try:
        mode = os.stat(target).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _identity(path: str | os.PathLike[str]) -> tuple[bool, tuple[int, int]] | None:
    """(is a folder, (device, inode)) of what ``path`` names, following links; None if nothing."""
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return None
    return stat.S_ISDIR(found.st_mode), (found.st_dev, found.st_ino)


@contextmanager
def open_output(target: str, inputs: Iterable[str | os.PathLike[str]] = ()) -> Iterator[BinaryIO]:
    """Stdout (``-``); a device or a named pipe as it is; else a temporary file beside ``target``
    renamed over it when all went well.

    Raises:
        UsageError: ``target`` names an input or lies inside an input folder (``refuse_inputs``),
            or its folder cannot be written.
    """
    if target == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    refuse_inputs(target, inputs)
    if _is_stream(target):  # /dev/null, a named pipe: written into, never replaced by a file
        with open(target, "wb", buffering=1 << 20) as stream:
            yield stream
        return
    final = Path(target)
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent)
    except OSError as e:
        raise UsageError(f"cannot write {final}: {e.strerror or e}") from e
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as raw:
            yield raw
        os.chmod(temp, 0o644)
        os.replace(temp, final)
    except OSError as e:
        Path(temp).unlink(missing_ok=True)
        if e.errno not in _FULL:
            raise
        raise Trace2PerfettoError(f"cannot write {final}: {e.strerror}; nothing written (the partial file "
                                  "was removed)") from None
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


# what only a write fails with (the temporary files' writes say theirs: errors.temporary_writes)
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
