"""Find the rank directories under a profiler output directory and who reads each.

Accepts a single rank directory, a profiler output holding several (one per device), a parent
holding several nodes' outputs, or one file as these files travel (attached to an issue, copied
off a cluster without their folder), read as one rank. What is a rank's folder or file is each
reader's to say (``readers``); this module walks, asks them, and keeps one job's ranks.
Symlinked directories are not followed, so loops cannot hang it.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from pathlib import Path

from . import readers
from .errors import Diagnostics, InputError, UsageError
from .model import RankInfo
from .select import format_ids


def discover(path: Path, diag: Diagnostics | None = None) -> list[RankInfo]:
    """Every rank found under ``path``, ordered by rank.

    Two directories claiming one rank are two runs in one folder: when their collection start
    times differ the newer wins, with a warning in ``diag`` (as msprof-analyze does); when they
    cannot be told apart it is an error naming both. Ranks whose profiles start too far apart to
    be one job are an error too (``_one_run``).

    Raises:
        UsageError: ``path`` does not exist, or holds nothing any reader recognises.
        InputError: two directories claim the same rank at the same time (or at an unknown
            one), or a rank's metadata is unreadable.
        UsageError: ranks that started ONE_JOB_NS apart or more (two runs in one folder).
    """
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    if not path.is_dir():
        return _lone_file(path, diag)
    ranks: dict[int, RankInfo] = {}
    hosts: dict[int, RankInfo] = {}
    for folder, found in _rank_dirs(path, diag):
        for info in found.rank_infos(folder, diag):
            _claim(ranks if found.attach is None else hosts, info, diag)
    for rank, host in hosts.items():
        if rank in ranks:
            ranks[rank].host_paths = host.host_paths
        else:
            ranks[rank] = host
    if not ranks:
        raise UsageError(f"{path}: no profiler output found; looked for {readers.looked_for()}")
    _one_run(path, ranks.values())
    unaligned = [info for info in ranks.values() if not info.wall_clock]
    if unaligned and diag is not None:
        diag.note("unaligned_clock", f"rank {format_ids(i.rank for i in unaligned)}: times are "
                  f"{unaligned[0].clock}")
    return [ranks[r] for r in sorted(ranks)]


def _claim(ranks: dict[int, RankInfo], info: RankInfo, diag: Diagnostics | None) -> None:
    """File ``info`` under its rank; of two runs claiming one rank the newer wins."""
    other = ranks.get(info.rank)
    if other is not None and other.format != info.format:  # not two runs: two jobs, or two numberings
        raise UsageError(f"rank {info.rank} is claimed by a {other.format} profile ({other.path}) and by a "
                         f"{info.format} one ({info.path}); pass the folder of one job")
    if other is not None:
        if info.start_ns is None or other.start_ns is None or info.start_ns == other.start_ns:
            raise InputError(info.path, "", f"rank {info.rank} is also claimed by {other.path}",
                             hint="pass the directory of one job")
        info, other = (info, other) if info.start_ns > other.start_ns else (other, info)
        if diag is not None:
            diag.warn("duplicate_rank", f"rank {info.rank} is in {other.path} and in the newer "
                      f"{info.path}; kept the newer", f"rank {info.rank} ({other.path})")
    ranks[info.rank] = info


# The ranks of one job start their profilers together: the profiler's schedule counts steps, which
# the ranks run in step (2 ms to 0.25 s apart on the real samples), so starts differ by the ranks'
# start-up skew at most, minutes in a large job. An hour apart, they are two runs.
ONE_JOB_NS = 3600 * 10**9


def _one_run(root: Path, ranks: Iterable[RankInfo]) -> None:
    """Refuse ranks on wall clocks whose profiles start ONE_JOB_NS apart or more: two runs in one
    folder, whose cross-rank figures (clock offsets, waits) would be nonsense. Ranks on their own
    clocks have no comparable start and are not judged (discovery notes they are not aligned)."""
    timed = sorted((i for i in ranks if i.wall_clock and i.start_ns is not None), key=lambda i: i.start_ns)
    for i, (before, after) in enumerate(itertools.pairwise(timed)):
        gap = after.start_ns - before.start_ns
        if gap >= ONE_JOB_NS:
            earlier, later = timed[: i + 1], timed[i + 1:]
            raise UsageError(
                f"{root}: two runs, not one job: {_side(earlier, before, 'by')} and "
                f"{_side(later, after, 'from')}, {_duration(gap)} later; the ranks of one job start their "
                "profilers within minutes of each other; pass the folder of one run")


def _side(infos: list[RankInfo], edge: RankInfo, word: str) -> str:
    """``rank 3 started at ... (path)``, or ``ranks 0-3 started by ... (rank 3: path)``."""
    import datetime  # for this message only

    when = datetime.datetime.fromtimestamp(edge.start_ns // 10**9, datetime.timezone.utc)
    text = when.strftime("%Y-%m-%d %H:%M:%S UTC")
    if len(infos) == 1:
        return f"rank {edge.rank} started at {text} ({edge.path})"
    return f"ranks {format_ids(i.rank for i in infos)} started {word} {text} (rank {edge.rank}: {edge.path})"


def _duration(ns: int) -> str:
    hours = ns / 3600e9
    return f"{hours / 24:.1f} days" if hours >= 48 else f"{hours:.1f} hours"


def _rank_dirs(root: Path, diag: Diagnostics | None):
    """Walk ``root`` top-down; a directory a reader claims is not walked into. A rank's folder
    with nothing to read in it is said, never passed over in silence."""
    for folder, subdirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        held = subdirs + files
        found = readers.recognise(here, held)
        if found is not None:
            # a folder of rank files (not a profiler's own folder) may hold another profiler's files
            others = readers.also_recognise(here, held, found) if diag is not None and found.files else []
            if others:
                diag.warn("other_format_unread", f"{here}: also holds {' and '.join(r.name for r in others)}"
                          f" output, not read (a folder is read as {found.name}'s): pass it in a folder of"
                          " its own")
            yield here, found
            if not found.files:
                subdirs.clear()
                continue
        subdirs.sort()
        empty = None if found is not None else readers.missing_data(here, held)
        if empty and diag is not None:
            diag.warn("empty_rank_dir", *empty)


def _lone_file(path: Path, diag: Diagnostics | None) -> list[RankInfo]:
    """One file's ranks (one, or an XSpace's device planes), by the first reader that reads it alone.

    Raises:
        UsageError: no reader reads it alone, or it holds no rank.
    """
    infos = readers.lone_file(path, diag)
    if infos is None:
        raise UsageError(f"{path}: not a file this tool reads alone ({readers.read_alone()}); "
                         "or pass the profiler output directory")
    if not infos:
        raise UsageError(f"{path}: holds no rank to read")
    return infos
