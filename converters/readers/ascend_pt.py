"""torch_npu's profiler and MindSpore >= 2.3: ``*_ascend_pt`` / ``*_ascend_ms`` (formats.md §5).

One directory per rank: ``profiler_info_{rank}.json`` (``rank_id``; single-card runs may have
neither, then rank 0), ``profiler_metadata.json`` (``parallel_group_info``: communication groups
and their global ranks) and ``ASCEND_PROFILER_OUTPUT/trace_view.json``, one line of Chrome
trace with ``ts`` as strings of epoch µs with 3 decimals (parsed exactly to ns). Steps are the
``ProfilerStep#N`` slices on the Python thread.

Read by ``chrome_trace``: host layers ("Python", "CANN"), "Ascend Hardware" streams, "HCCL"
group ops and planes. Not yet read (issue 4): ``kernel_details.csv`` when there is no
trace_view, the database form, counter tracks and host-to-device flows.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from ..errors import Diagnostics, InputError
from ..model import RankInfo, StepRecords
from . import chrome_trace

NAME = "ascend_pt"
CLOCK = "epoch µs as written by the profiler"
_OUTPUT = "ASCEND_PROFILER_OUTPUT"


def sniff(rank_dir: Path) -> bool:
    """A rank directory holding ``ASCEND_PROFILER_OUTPUT/trace_view.json``."""
    named = rank_dir.name.endswith(("_ascend_pt", "_ascend_ms")) or any(rank_dir.glob("profiler_info*.json"))
    return named and (rank_dir / _OUTPUT / "trace_view.json").is_file()


def rank_info(rank_dir: Path) -> RankInfo:
    """Rank, collection start and communication groups, from the two small JSON files.

    Raises:
        InputError: ``profiler_info_*.json`` is not a JSON object.
    """
    info_path = next(iter(sorted(rank_dir.glob("profiler_info*.json"))), None)
    info = _small_json(info_path) if info_path else {}
    rank = info.get("rank_id")
    rank = 0 if rank is None or int(rank) < 0 else int(rank)
    groups = ""
    metadata_path = rank_dir / "profiler_metadata.json"
    if metadata_path.is_file():
        parallel = _small_json(metadata_path).get("parallel_group_info") or {}
        groups = "; groups: " + ", ".join(
            f"{g.get('group_name', name)} {g.get('global_ranks')}" for name, g in parallel.items()
            if isinstance(g, dict)
        ) if parallel else ""
    return RankInfo(
        rank=rank,
        format=NAME,
        path=rank_dir,
        start_ns=_collection_start_ns(info),
        clock=CLOCK + groups,
        source_paths=(rank_dir / _OUTPUT / "trace_view.json",),
    )


def read(rank: RankInfo, diag: Diagnostics, *, detail: bool = True) -> Iterator[StepRecords]:
    """Yield the rank's records one step at a time, steps in time order.

    Raises:
        InputError: trace_view.json is not a JSON array of events.
    """
    yield from chrome_trace.read_merged(rank, list(rank.source_paths), diag, detail)


def _collection_start_ns(info: dict[str, Any]) -> int | None:
    """Epoch ns of the collection start: its end, less the monotonic time it lasted."""
    try:
        end = info["end_info"]
        duration = int(end["MonotonicTimeEnd"]) - int(info["start_info"]["start_monotonic"])
        return int(end["collectionTimeEnd"]) - duration
    except (KeyError, TypeError, ValueError):
        return None


def _small_json(path: Path) -> dict[str, Any]:
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        raise InputError(path, "", f"cannot read JSON: {e}") from e
    if not isinstance(value, dict):
        raise InputError(path, "top level", "expected a JSON object")
    return value
