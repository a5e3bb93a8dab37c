"""Find the rank directories under a profiler output directory and who reads each.

Accepts a single rank directory, a profiler output holding several (one per device), or a parent
holding several nodes' outputs. Symlinked directories are not followed, so loops cannot hang it.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError, UsageError
from .model import RankInfo
from .readers import LOOKED_FOR, READERS


def discover(path: Path) -> list[RankInfo]:
    """Every rank found under ``path``, ordered by rank.

    Raises:
        UsageError: ``path`` does not exist, or holds nothing any reader recognises.
        InputError: two directories claim the same rank, or a rank's metadata is unreadable.
    """
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory; pass the profiler output directory")
    ranks: dict[int, RankInfo] = {}
    for folder, reader in _rank_dirs(path):
        info = reader.rank_info(folder)
        if info.rank in ranks:
            raise InputError(
                folder, "", f"rank {info.rank} is also claimed by {ranks[info.rank].path}",
                hint="pass the directory of one job",
            )
        ranks[info.rank] = info
    if not ranks:
        raise UsageError(f"{path}: no profiler output found; looked for {LOOKED_FOR}")
    return [ranks[r] for r in sorted(ranks)]


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
