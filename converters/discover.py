"""Find the rank directories under a profiler output directory and who reads each.

Accepts a single rank directory, a profiler output holding several (one per device), a parent
holding several nodes' outputs, or one file as these files travel (attached to an issue, copied
off a cluster without their folder): ``trace_view.json``, ``kernel_details.csv``,
``msprof_*.json`` or a profiler database, read as one rank. Symlinked directories are not
followed, so loops cannot hang it.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import os
import re
from collections.abc import Iterable
from pathlib import Path

from .errors import Diagnostics, InputError, UsageError
from .model import RankInfo
from .readers import LOOKED_FOR, READERS, ascend_db, ascend_pt, kineto, msprof, paddle
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
        return [_lone_file(path, diag)]
    ranks: dict[int, RankInfo] = {}
    hosts: dict[int, RankInfo] = {}
    for folder, reader in _rank_dirs(path, diag):
        files = getattr(reader, "FILES", False)  # a reader of files says how it numbered them
        for info in reader.rank_infos(folder, diag) if files else reader.rank_infos(folder):
            if getattr(reader, "ATTACHES", False):
                _claim(hosts, info, diag)
            else:
                _claim(ranks, info, diag)
    for rank, host in hosts.items():
        if rank in ranks:
            ranks[rank].host_paths = host.host_paths
        else:
            ranks[rank] = host
    if not ranks:
        raise UsageError(f"{path}: no profiler output found; looked for {LOOKED_FOR}")
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
    for folder, subdirs, _files in os.walk(root, followlinks=False):
        here = Path(folder)
        reader = next((r for r in READERS if r.sniff(here)), None)
        if reader is not None:
            yield here, reader
            if not getattr(reader, "FILES", False):
                subdirs.clear()
                continue
        subdirs.sort()
        empty = None if reader is not None else ascend_pt.missing_data(here)
        if empty and diag is not None:
            diag.warn("empty_rank_dir", *empty)


_ASCEND_PT_FILES = re.compile(
    r"^(trace_view\.json|kernel_details\.csv|ascend_(pytorch|mindspore)_profiler\w*\.db)$")
_MSPROF_JSON = re.compile(r"^msprof_(slice_\d+_)?\d+\.json$")
_MSPROF_DB = re.compile(r"^msprof_\w*\.db$")
_LONE_FILES = ("trace_view.json, kernel_details.csv, msprof_*.json, msprof_*.db, "
               "ascend_pytorch_profiler_*.db, a PyTorch profiler trace or a Paddle profiler file")


def _lone_file(path: Path, diag: Diagnostics | None) -> RankInfo:
    """One file read as one rank; its rank and clock from its folder when it still sits in the
    profiler's layout, else from the file itself (a database's RANK_DEVICE_MAP), else rank 0."""
    name = path.name
    if _ASCEND_PT_FILES.match(name):
        rank_dir = path.parent.parent
        if path.parent.name == "ASCEND_PROFILER_OUTPUT" and any(rank_dir.glob("profiler_info*.json")):
            info = ascend_pt.rank_infos(rank_dir)[0]
        else:
            rank = ascend_db.db_rank(path) if name.endswith(".db") else None
            info = RankInfo(0 if rank is None else rank, ascend_pt.NAME, path.parent, clock=ascend_pt.CLOCK)
            if rank is None and diag is not None:
                diag.note("lone_file_rank", f"{path}: nothing says which rank this is; taken as rank 0")
        return dataclasses.replace(info, source_paths=(path,))
    if _MSPROF_DB.match(name):
        if path.parent.name.startswith("PROF_"):  # its rank may come from the device_N beside it
            return dataclasses.replace(msprof.rank_infos(path.parent)[0], source_paths=(path,))
        return ascend_db.rank_info_for_file(path)
    if _MSPROF_JSON.match(name):
        devices = sorted(d for d in path.parent.parent.glob("device_*") if msprof.sniff(d))
        if path.parent.name == "mindstudio_profiler_output" and len(devices) == 1:
            return dataclasses.replace(msprof.rank_infos(devices[0])[0], source_paths=(path,))
        if diag is not None:
            diag.note("lone_file_clock", f"{path}: no device_N/start_info.N beside it: rank 0, times "
                      "on the host's monotonic clock, not aligned to wall time")
        return RankInfo(0, msprof.NAME, path, clock="the file's own µs (no start_info.N beside it)",
                        source_paths=(path,), wall_clock=False)
    if kineto.is_trace(path):
        return kineto.rank_info(path)
    if paddle.is_trace(path):
        return paddle.rank_info(path)
    raise UsageError(f"{path}: not a file this tool reads alone ({_LONE_FILES}); "
                     "or pass the profiler output directory")
