"""Find the rank directories under a profiler output directory and who reads each.

Accepts a single rank directory, a profiler output holding several (one per device), or a parent
holding several nodes' outputs. Symlinked directories are not followed, so loops cannot hang it.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import Diagnostics, InputError, UsageError
from .model import RankInfo
from .readers import LOOKED_FOR, READERS
from .select import format_ids


def discover(path: Path, diag: Diagnostics | None = None) -> list[RankInfo]:
    """Every rank found under ``path``, ordered by rank.

    Two directories claiming one rank are two runs in one folder: when their collection start
    times differ the newer wins, with a warning in ``diag`` (as msprof-analyze does); when they
    cannot be told apart it is an error naming both.

    Raises:
        UsageError: ``path`` does not exist, or holds nothing any reader recognises.
        InputError: two directories claim the same rank at the same time (or at an unknown
            one), or a rank's metadata is unreadable.
    """
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory; pass the profiler output directory")
    ranks: dict[int, RankInfo] = {}
    hosts: dict[int, RankInfo] = {}
    for folder, reader in _rank_dirs(path):
        for info in reader.rank_infos(folder):
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
    unaligned = [info for info in ranks.values() if not info.wall_clock]
    if unaligned and diag is not None:
        diag.note("unaligned_clock", f"rank {format_ids(i.rank for i in unaligned)}: times are "
                  f"{unaligned[0].clock}")
    return [ranks[r] for r in sorted(ranks)]


def _claim(ranks: dict[int, RankInfo], info: RankInfo, diag: Diagnostics | None) -> None:
    """File ``info`` under its rank; of two runs claiming one rank the newer wins."""
    other = ranks.get(info.rank)
    if other is not None:
        if info.start_ns is None or other.start_ns is None or info.start_ns == other.start_ns:
            raise InputError(info.path, "", f"rank {info.rank} is also claimed by {other.path}",
                             hint="pass the directory of one job")
        info, other = (info, other) if info.start_ns > other.start_ns else (other, info)
        if diag is not None:
            diag.warn("duplicate_rank", f"rank {info.rank} is in {other.path} and in the newer "
                      f"{info.path}; kept the newer")
    ranks[info.rank] = info


def _rank_dirs(root: Path):
    """Walk ``root`` top-down; a directory a reader claims is not walked into."""
    for folder, subdirs, _files in os.walk(root, followlinks=False):
        here = Path(folder)
        reader = next((r for r in READERS if r.sniff(here)), None)
        if reader is not None:
            subdirs.clear()
            yield here, reader
        else:
            subdirs.sort()
