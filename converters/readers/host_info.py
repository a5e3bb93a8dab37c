"""MindSpore host_info: host stages and host memory per rank (docs/formats.md §4; MindSpore 2.1-2.3).

``Profiler(profile_framework=...)`` writes ``host_info/host_info_{rank}.csv``::

    tid,pid,parent_pid,module_name,event,stage,level,start_end,custom_info,memory_usage(kB),time_stamp(us)

(``host_memory_{rank}.csv`` in MindSpore's docs: the same columns without units), and
``host_info/timeline_{rank}.json``, a Chrome trace made from the same rows, read only when there
is no CSV. Start (0) and end (1) rows pair per thread and (module, event, stage), innermost first,
into host slices on one lane per thread; ``start_end`` 2 is an instant. A start without an end
(the job stopped) lasts to the rank's last time stamp and is marked unfinished, with a warning.
``memory_usage`` (kB of VmRSS, 0 when not collected) becomes the rank's ``Host memory`` counter in
bytes. ``time_stamp`` is epoch µs, so host slices line up with the device time of the same rank.

A host_info rank joins the device rank of the same id (``discover``); on its own it is a rank
with host activity only. Either way it is drawn in detail output only.
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from ..errors import Diagnostics, InputError
from ..model import HOST_MEMORY, Layer, RankInfo, Sample, Slice, StepRecords, checked_ns
from .base import Reader
from .common import jsonfile
from .common.spill import by_time
from .common.textfile import csv_header, csv_rows, whole_lines
from .common.times import us_to_ns

NAME = "host_info"
CLOCK = "host system clock, epoch µs"

_FILE = re.compile(r"^(host_info|host_memory)_(\d+)\.csv$|^timeline_(\d+)\.json$")
_NEEDED = ("tid", "module_name", "event", "stage", "start_end", "time_stamp")  # in _Columns' order
_CUSTOM = re.compile(r"\{([^{}:]*):([^{}]*)\}")
_BATCH = 10_000
_MEMORY_LIMIT_KB = 1 << 52  # 4 EiB: no host has more


def sniff(folder: Path) -> bool:
    """A ``host_info`` folder with a rank's CSV or timeline."""
    return folder.name == "host_info" and any(_FILE.match(p.name) for p in folder.iterdir() if p.is_file())


def rank_infos(folder: Path, diag: Diagnostics | None = None) -> list[RankInfo]:
    """One rank per id; of its files the raw CSV is read, the timeline made from it only without one."""
    files: dict[int, list[Path]] = defaultdict(list)
    for path in sorted(folder.iterdir()):
        found = _FILE.match(path.name)
        if found and path.is_file():
            files[int(found.group(2) or found.group(3))].append(path)
    infos = []
    for rank, paths in sorted(files.items()):
        chosen = min(paths, key=lambda p: (p.suffix != ".csv", not p.name.startswith("host_info")))
        infos.append(RankInfo(rank=rank, format=NAME, path=folder, clock=CLOCK, start_ns=_first_ns(chosen),
                              host_paths=(chosen,)))
    return infos


def _first_ns(path: Path) -> int | None:
    """A time before the file's first (the JSON output's origin), from its head; None: none there.

    Rows (and timeline events) are only nearly in time order: the first found less a second.
    """
    with open(path, encoding="utf-8", errors="replace") as f:
        head = f.read(1 << 16)
    if path.suffix == ".json":
        found = re.search(r'"ts"\s*:\s*"?(\d+(?:\.\d+)?)', head)
        try:
            return checked_ns(us_to_ns(found.group(1)) - 10**9) if found else None
        except ValueError:
            return None
    lines = head.splitlines()
    column = _column_index(lines[0].split(",") if lines else [])
    for row in csv.reader(lines[1:-1]):
        try:
            ts = int(row[column["time_stamp"]])
            if ts:
                return checked_ns(ts * 1000 - 10**9)
        except (KeyError, IndexError, ValueError):
            continue
    return None


def read(rank: RankInfo, diag: Diagnostics, *, detail: bool = True) -> Iterator[StepRecords]:
    """A rank of host activity only has no steps of its own: ``attach`` yields its records."""
    return iter(())


def attach(steps: Iterable[StepRecords], rank: RankInfo, diag: Diagnostics, *,
           min_level: int = 0) -> Iterator[StepRecords]:
    """``steps`` (in time order) with the rank's host slices and memory samples added.

    A step takes the host records that start before it ends, from up to a second before it
    starts (the host launches a step before the device runs it). Host records no step takes (a
    compile phase, what follows the last step) come as steps without a number, a bounded number
    of records at a time. ``min_level`` 1 keeps the stages marked for users and leaves out those
    for framework developers (level 0).

    Raises:
        InputError: a host file without the columns it needs, or a timeline that is not JSON.
    """
    def fill(add: Callable[[list[Slice | Sample]], None]) -> None:
        for path in rank.host_paths:
            if path.suffix == ".csv":
                _read_csv(rank, path, diag, min_level, add)
            else:
                _read_timeline(rank, path, diag, min_level, add)

    return by_time(steps, rank.rank, fill)


def host_memory(rank: RankInfo, diag: Diagnostics) -> Iterator[Sample]:
    """The rank's host memory samples alone (the ``HOST_MEMORY`` counter ``attach`` draws), from its
    CSVs in file order: ``trace2perfetto memory``'s Host row. Rows ``attach`` warns of are passed
    over here without a word: the drawing read says them."""
    for path in rank.host_paths:
        if path.suffix != ".csv":
            continue  # the timeline holds no memory
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            rows = csv.reader(whole_lines(f, path, diag))
            at = _Columns(path, csv_header(rows, path))
            for row in csv_rows(rows, path, diag):
                try:
                    ts_ns, memory, _, _ = at.numbers(row)
                except (ValueError, ArithmeticError, IndexError):
                    continue
                if ts_ns and memory:
                    yield Sample(rank.rank, HOST_MEMORY, ts_ns, memory * 1024.0)


# -- the CSV ------------------------------------------------------------------------------------


def _read_csv(rank: RankInfo, path: Path, diag: Diagnostics, min_level: int, emit) -> None:
    """Pair the rows of one host CSV into slices and samples, handed to ``emit`` in batches."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = csv.reader(whole_lines(f, path, diag))
        at = _Columns(path, csv_header(rows, path))
        open_stages: dict[tuple[str, ...], list[tuple[int, list[str]]]] = defaultdict(list)
        batch: list[Slice | Sample] = []
        last_ns = untimed = 0
        for line, row in enumerate(csv_rows(rows, path, diag), start=2):
            try:
                ts_ns, memory, level, mark = at.numbers(row)
            except (ValueError, ArithmeticError, IndexError):
                if row:
                    diag.warn("bad_row", f"{path}: line {line}: expected {at.fields} fields, with numbers in "
                              "start_end, level, memory_usage and time_stamp; skipped")
                continue
            if not ts_ns:
                untimed += memory > 0  # profile_framework="memory": no time to draw it at
                continue
            last_ns = max(last_ns, ts_ns)
            if memory:
                batch.append(Sample(rank.rank, HOST_MEMORY, ts_ns, memory * 1024.0))
            if level < min_level:
                continue
            key = (row[at.tid], row[at.module], row[at.event], row[at.stage])
            if mark == 0:
                open_stages[key].append((ts_ns, row))
            elif mark == 1:
                if open_stages.get(key):
                    start, first = open_stages[key].pop()
                    batch.append(at.stage_slice(rank, key, start, ts_ns - start, first))
                else:
                    diag.warn("unpaired_end", f"{path}: line {line}: an end of {'::'.join(key[1:])} without "
                              "its start; skipped")
            else:
                batch.append(at.stage_slice(rank, key, ts_ns, 0, row))
            if len(batch) >= _BATCH:
                emit(batch)
                batch = []
        unfinished = [at.stage_slice(rank, key, start, max(last_ns - start, 0), row, unfinished=True)
                      for key, stack in open_stages.items() for start, row in stack]
        emit(batch + unfinished)
    if unfinished:
        diag.warn("unfinished", f"{path}: {len(unfinished)} host stages start and never end (the job "
                  "stopped?); drawn to the rank's last time stamp and marked unfinished")
    if untimed:
        diag.note("untimed_memory", f"{path}: {untimed} memory samples have no time stamp "
                  "(profile_framework=\"memory\") and cannot be drawn")


def _column_index(header: list[str]) -> dict[str, int]:
    """Column name (units such as ``(kB)`` dropped: both namings of the CSV) -> its position."""
    return {re.sub(r"\(.*\)$", "", name.strip()): i for i, name in enumerate(header)}


class _Columns:
    """Where each field of a host CSV is (headers come with units or without), and reading them."""

    def __init__(self, path: Path, header: list[str]) -> None:
        column = _column_index(header)
        missing = [c for c in _NEEDED if c not in column]
        if missing:
            raise InputError(path, "line 1", f"no column {', '.join(missing)} in the header",
                             hint="expected MindSpore's host_info_N.csv")
        self.fields = len(header)
        self.tid, self.module, self.event, self.stage, self.mark, self.time = (column[c] for c in _NEEDED)
        self.level, self.custom, self.memory = map(column.get, ("level", "custom_info", "memory_usage"))

    def numbers(self, row: list[str]) -> tuple[int, int, int, int]:
        """(time stamp in ns, memory in kB, level, start_end); ValueError or IndexError if broken."""
        if len(row) < self.fields:
            raise IndexError(len(row))
        time = row[self.time]
        try:
            ts_ns = checked_ns(int(time) * 1000)  # integer µs, as MindSpore writes them
        except ValueError:
            ts_ns = us_to_ns(time.strip() or "0")
        memory = int(row[self.memory] or 0) if self.memory is not None else 0
        if not 0 <= memory < _MEMORY_LIMIT_KB:
            raise ValueError(f"{memory} kB of memory")
        return ts_ns, memory, int(row[self.level] or 0) if self.level is not None else 0, int(row[self.mark])

    def stage_slice(self, rank: RankInfo, key: tuple[str, ...], start: int, dur: int, row: list[str],
                    unfinished: bool = False) -> Slice:
        """A stage named ``module::event::stage``; its level and custom info are its args."""
        tid, *parts = key
        args: dict[str, Any] = {}
        if self.level is not None:
            args["level"] = int(row[self.level] or 0)
        if self.custom is not None and row[self.custom]:
            args.update(_CUSTOM.findall(row[self.custom]))
        if unfinished:
            args["unfinished"] = True
        return Slice(rank.rank, Layer.HOST, f"Thread {tid}", "::".join(filter(None, parts)), start, dur,
                     args or None)


# -- the timeline -------------------------------------------------------------------------------


def _read_timeline(rank: RankInfo, path: Path, diag: Diagnostics, min_level: int, emit) -> None:
    """``X`` events (and ``B``/``E`` pairs per thread) of a host timeline, as host slices."""
    open_stages: dict[tuple[Any, Any], list[dict]] = defaultdict(list)
    last_ns = 0
    for events in jsonfile.iter_batches(path, diag, orjson.loads):
        batch: list[Slice | Sample] = []
        for event in events:
            if not isinstance(event, dict) or event.get("ph") not in ("X", "B", "E", "i", "I"):
                continue
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            try:
                if int(args.get("level", min_level)) < min_level:
                    continue
                ts = us_to_ns(event["ts"])
                dur = us_to_ns(event.get("dur", 0)) if event["ph"] == "X" else 0
                thread = (event.get("pid"), event.get("tid"))
                hash(thread)  # numbers or text, not arrays or objects
            except (KeyError, TypeError, ValueError, ArithmeticError):
                diag.warn("bad_event", f"{path}: expected numbers ts and dur in µs, and a pid and tid; an "
                          "event skipped")
                continue
            last_ns = max(last_ns, ts + dur)
            if event["ph"] == "B":
                open_stages[thread].append({**event, "ts": ts})
                continue
            if event["ph"] == "E":
                if not open_stages[thread]:
                    continue
                event = open_stages[thread].pop()
                ts, dur = event["ts"], ts - event["ts"]
            batch.append(_event_slice(rank, event, thread, ts, dur))
        emit(batch)
    unfinished = [_event_slice(rank, event, thread, event["ts"], last_ns - event["ts"], unfinished=True)
                  for thread, stack in open_stages.items() for event in stack]
    if unfinished:
        emit(unfinished)
        diag.warn("unfinished", f"{path}: {len(unfinished)} host stages begin and never end (the job "
                  "stopped?); drawn to the rank's last time stamp and marked unfinished")


def _event_slice(rank: RankInfo, event: dict, thread: tuple[Any, Any], ts: int, dur: int,
                 unfinished: bool = False) -> Slice:
    args = event.get("args") if isinstance(event.get("args"), dict) else {}
    if unfinished:
        args = {**args, "unfinished": True}
    return Slice(rank.rank, Layer.HOST, f"Thread {thread[1]}", str(event.get("name", "?")), ts, max(dur, 0),
                 args or None)


READER = Reader(
    name=NAME,
    folder="host_info/ with host_info_N.csv or timeline_N.json",
    sniff=sniff, rank_infos=rank_infos, read=read,
    attach=attach,  # its ranks join the device ranks of the same id
    host_memory=host_memory,
)
