"""torch_npu's profiler and MindSpore >= 2.3: ``*_ascend_pt`` / ``*_ascend_ms`` (docs/formats.md §5).

One directory per rank: ``profiler_info_{rank}.json`` (``rank_id``; single-card runs may have
neither, then rank 0), ``profiler_metadata.json`` (``parallel_group_info``: communication groups
and their global ranks) and ``ASCEND_PROFILER_OUTPUT/trace_view.json``, one line of Chrome
trace with ``ts`` as strings of epoch µs with 3 decimals (parsed exactly to ns). Steps are the
``ProfilerStep#N`` slices on the Python thread.

Read by ``chrome_trace``: host layers ("Python", "CANN"), "Ascend Hardware" streams, "HCCL"
group ops and planes. Without trace_view.json (often deleted for size), device tasks and
communication ops come from ``kernel_details.csv`` (columns by header name, as they drift
between versions; times end with a TAB; ``Step Id`` gives the step, whose bounds are then its
device activity). The database form (``ascend_pytorch_profiler_{rank}.db``, ``export_type=db``)
is read by ``ascend_db``. A rank with none of these left, only the profiler's analysis
(``step_trace_time.csv``, ``communication.json``, ``analysis.db``), is read by ``ascend_analysis``:
its steps as the profiler's figures and its communication ops, without bounds or device tasks.
"""

from __future__ import annotations

import csv
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import NOTHING_DRAWN, Diagnostics, InputError, UsageError
from ..intervals import is_compute
from ..model import (
    MEMORY_KINDS,
    Layer,
    RankInfo,
    Sample,
    Slice,
    Step,
    StepRecords,
    checked_id,
    checked_ns,
    comm_type,
    decoded_args,
    memory_counter,
)
from . import MatrixLink, ascend_analysis, ascend_db, chrome_trace, collectives, mindspore_cpu, op_memory
from .base import Reader
from .common import jsonfile, times
from .common.spill import StepSpill
from .common.textfile import csv_header, csv_rows, whole_lines

NAME = "ascend_pt"
CLOCK = "epoch µs as written by the profiler"
_OUTPUT = "ASCEND_PROFILER_OUTPUT"
_LONE_FILE = re.compile(
    r"^(trace_view\.json|kernel_details\.csv|ascend_(pytorch|mindspore)_profiler\w*\.db)$")


def sniff(rank_dir: Path) -> bool:
    """A rank directory holding trace_view.json, the database, kernel_details.csv or at least the
    profiler's analysis files; or a folder holding a loose trace_view.json and kernel_details.csv
    (copied out of their rank's folder), one rank."""
    return (_named(rank_dir) and bool(_sources(rank_dir))) or _loose(rank_dir)


def _loose(folder: Path) -> bool:
    return not _named(folder) and all((folder / name).is_file() for name in _PAIR)


_PAIR = ("trace_view.json", "kernel_details.csv")
_KERNELS_LOOKED_AT = 50  # kernel_details' first rows sought in trace_view.json


def _belong_together(folder: Path) -> bool:
    """Whether the loose trace_view.json and kernel_details.csv are of one run: one of
    kernel_details' first kernels starts in trace_view.json too (both write a task's start as
    the same µs text with 3 decimals: one task's, to the ns)."""
    import mmap  # here: only a loose pair needs them

    trace, kernels = (folder / name for name in _PAIR)
    with open(kernels, newline="", encoding="utf-8", errors="replace") as f:
        rows = zip(range(_KERNELS_LOOKED_AT), csv.DictReader(f), strict=False)
        starts = {(row.get("Start Time(us)") or "").strip() for _, row in rows} - {""}
    if not starts or trace.stat().st_size == 0:
        return False
    sought = re.compile(b'"(?:' + b"|".join(re.escape(s.encode()) for s in sorted(starts)) + b')"')
    with open(trace, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return sought.search(data) is not None  # one pass over the file, whatever its size


def _named(rank_dir: Path) -> bool:
    """A folder that is a rank's by its name or its ``profiler_info*.json``."""
    return rank_dir.name.endswith(("_ascend_pt", "_ascend_ms")) or any(rank_dir.glob("profiler_info*.json"))


def missing_data(rank_dir: Path) -> tuple[str, str] | None:
    """Why a folder that is a rank's by its name holds nothing to read, and which rank it is (by its
    ``profiler_info*.json``, where that says) or folder; None if it holds something."""
    if not _named(rank_dir) or _sources(rank_dir):
        return None
    try:
        info_path, info = _profiler_info(rank_dir)
        rank = jsonfile.integer(info["rank_id"], info_path, "rank_id") if "rank_id" in info else None
    except InputError:
        rank = None
    subject = f"rank {rank} ({rank_dir})" if rank is not None and rank >= 0 else str(rank_dir)
    return (f"{subject}: a profiler rank folder without {_OUTPUT}/trace_view.json, a database, "
            "kernel_details.csv or the profiler's analysis files (not parsed by the profiler, or "
            "deleted); left out"), subject


def lone_file(path: Path, diag: Diagnostics | None) -> RankInfo | None:
    """One of a rank's files read alone (None if ``path`` is none of ``READER.lone_files``): its rank and
    clock from its folder when it still sits in the profiler's layout, else from the file itself
    (a database's RANK_DEVICE_MAP), else rank 0."""
    if not _LONE_FILE.match(path.name):
        return None
    rank_dir = path.parent.parent
    if path.parent.name == _OUTPUT and any(rank_dir.glob("profiler_info*.json")):
        info = rank_infos(rank_dir)[0]
    else:
        rank = ascend_db.db_rank(path) if path.name.endswith(".db") else None
        info = RankInfo(0 if rank is None else rank, NAME, path.parent, clock=CLOCK)
        if rank is None and diag is not None:
            diag.note("lone_file_rank", f"{path}: nothing says which rank this is; taken as rank 0")
    return dataclasses.replace(info, source_paths=(path,))


def _profiler_info(rank_dir: Path) -> tuple[Path | None, dict[str, Any]]:
    """``profiler_info*.json`` and what it holds ({} where there is none).

    Raises:
        InputError: it is not a JSON object.
    """
    path = next(iter(sorted(rank_dir.glob("profiler_info*.json"))), None)
    return path, jsonfile.load_object(path) if path else {}


def _sources(rank_dir: Path) -> tuple[Path, ...]:
    """The file to read, richest first: trace_view.json, the database, kernel_details.csv; else the
    profiler's analysis files (``ascend_analysis.sources``)."""
    output = rank_dir / _OUTPUT
    for pattern in ("trace_view.json", "ascend_pytorch_profiler*.db", "ascend_mindspore_profiler*.db",
                    "kernel_details.csv"):
        found = sorted(p for p in output.glob(pattern) if p.is_file())
        if found:
            return (found[0],)
    return ascend_analysis.sources(output)


def rank_infos(rank_dir: Path, diag: Diagnostics | None = None) -> list[RankInfo]:
    """Rank, collection start and communication groups, from the two small JSON files.

    Raises:
        InputError: ``profiler_info_*.json`` is not a JSON object.
        UsageError: a loose trace_view.json and kernel_details.csv of two runs.
    """
    if _loose(rank_dir):
        if not _belong_together(rank_dir):
            raise UsageError(f"{rank_dir}: trace_view.json and kernel_details.csv do not belong together "
                             f"(none of kernel_details.csv's first {_KERNELS_LOOKED_AT} kernels is in "
                             "trace_view.json: two runs); pass one file")
        return [lone_file(rank_dir / "trace_view.json", None)]
    info_path, info = _profiler_info(rank_dir)
    sources = _sources(rank_dir)
    analysis = bool(sources) and ascend_analysis.is_analysis(sources[0])
    database = bool(sources) and sources[0].suffix == ".db" and not analysis
    if "rank_id" not in info and database:
        info = {**info, "rank_id": ascend_db.db_rank(sources[0]) or 0}
    rank = max(jsonfile.integer(info.get("rank_id", 0), info_path, "rank_id"), 0)  # single-card runs:
    # none, or -1; rank 0
    groups: dict[str, tuple[int, ...]] = {}
    metadata_path = rank_dir / "profiler_metadata.json"
    if metadata_path.is_file():
        parallel = jsonfile.load_object(metadata_path).get("parallel_group_info") or {}
        for name, group in parallel.items() if isinstance(parallel, dict) else ():
            ranks = group.get("global_ranks") if isinstance(group, dict) else None
            if isinstance(ranks, list) and all(type(r) is int for r in ranks):
                groups[str(group.get("group_name") or name)] = tuple(ranks)
    device, host = ascend_db.db_device_host(sources[0]) if database else (device_of(rank_dir), None)
    return [RankInfo(
        rank=rank,
        format=NAME,
        path=rank_dir,
        device=device,
        start_ns=_collection_start_ns(info),
        clock=ascend_analysis.CLOCK if analysis else CLOCK,
        groups=groups,
        source_paths=sources,
        host=host or host_of(rank_dir),
    )]


# torch_npu's tensorboard_trace_handler names a rank's folder {worker}_{timestamp}_ascend_pt, the
# worker by default {hostname}_{pid} and the timestamp 17 digits (ms); MindSpore >= 2.3 the same
_FOLDER = re.compile(r"^(?P<host>.+)_\d+_\d{17}_ascend_(?:pt|ms)$")


_NPU = re.compile(r"NPU:(\d+)")


def device_of(rank_dir: Path) -> int | None:
    """The device a rank ran on, from the first rows of the profiler's memory tables (their
    ``Device`` / ``Device Type`` column says ``NPU:1``); None where neither is there or says one."""
    for name in ("npu_module_mem.csv", "memory_record.csv"):
        try:
            with open(rank_dir / _OUTPUT / name, encoding="utf-8", errors="replace") as f:
                for _, line in zip(range(20), f, strict=False):
                    found = _NPU.search(line)
                    if found:
                        return int(found[1])
        except OSError:
            continue
    return None


def host_of(rank_dir: Path) -> str | None:
    """The host a rank ran on, from its folder's default name (None if renamed or custom)."""
    found = _FOLDER.match(rank_dir.name)
    return found.group("host") if found else None


def read(rank: RankInfo, diag: Diagnostics, *, detail: bool = True) -> Iterator[StepRecords]:
    """Yield the rank's records one step at a time, steps in time order.

    Raises:
        InputError: trace_view.json is not a JSON array of events, or kernel_details.csv lacks
            a column it needs.
    """
    source = rank.source_paths[0]
    if ascend_analysis.is_analysis(source):
        yield from ascend_analysis.read(rank, rank.source_paths, diag)
    elif source.name.startswith(_CPU_OPS):  # for ops only (with_op_types)
        yield from mindspore_cpu.framework_ops(rank, source, diag)
    elif source.suffix == ".json":
        steps = chrome_trace.read_merged(rank, [source], diag, detail)
        yield from _figured_without_planes(rank, source.parent, steps, diag) if detail else steps
    elif source.suffix == ".db":
        yield from ascend_db.read_db(rank, source, diag, detail)
    else:
        yield from _read_kernel_details(rank, source, diag, detail)


def memory(rank: RankInfo, diag: Diagnostics) -> Iterator[Slice | Sample]:
    """The rank's device memory (docs/formats.md §5.11): counters per component from
    ``memory_record.csv`` (else made from ``operator_memory.csv``'s totals), allocations as slices
    from ``operator_memory.csv``, each CANN module's reserved memory from ``npu_module_mem.csv``
    (drawn, as the database's ``NPU_MODULE_MEM``, not in the peaks); from the database's tables where
    the rank is read from one.

    Raises:
        InputError: a memory file without the columns it needs.
    """
    source = rank.source_paths[0] if rank.source_paths else None
    if source is not None and source.suffix == ".db" and not ascend_analysis.is_analysis(source):
        yield from ascend_db.memory(rank, source, diag)
        return
    output = rank.path / _OUTPUT if (rank.path / _OUTPUT).is_dir() else rank.path
    record, allocations = output / "memory_record.csv", output / "operator_memory.csv"
    recorded = record.is_file()
    # a memory_record.csv cut off (the job died writing it) lacks the totals after the cut, maybe the
    # peak: where operator_memory.csv is whole, its totals make the allocators' counters instead
    remade = recorded and _cut(record) and allocations.is_file() and not _cut(allocations)
    if remade:
        diag.warn("cut_memory_record", f"{record}: cut off (its last line has no line end): rank "
                  f"{rank.rank}'s PTA and GE counters and peaks are made from the complete "
                  f"{allocations.name}'s totals instead")
    if recorded:
        yield from _memory_record(rank, record, diag, skip=op_memory.COMPONENTS if remade else ())
    if allocations.is_file():
        found = _operator_memory(rank, allocations, diag)
        yield from op_memory.records(rank, found, counters=not recorded or remade)
    if (output / "npu_module_mem.csv").is_file():
        yield from _npu_module_mem(rank, output / "npu_module_mem.csv", diag)
    cpu = mindspore_cpu.framework_file(rank.path, "cpu_ms_memory_record", rank.rank)
    if cpu is not None:  # MindSpore on CPU: its allocator's totals
        yield from mindspore_cpu.framework_memory(rank, cpu, diag)


_RECORD_KINDS = tuple(f"Total {kind}(MB)" for kind in MEMORY_KINDS)
_MB = float(1 << 20)


def _cut(path: Path) -> bool:
    """Whether a text file ends inside a line (the profilers end every line)."""
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            return False
        f.seek(-1, 2)
        return f.read(1) != b"\n"


def _memory_record(rank: RankInfo, path: Path, diag: Diagnostics, skip: tuple[str, ...] = ()
                   ) -> Iterator[Sample]:
    """memory_record.csv: the allocators' totals after each of their events (PTA, GE), their sum
    (PTA+GE) and the application's device memory as the driver samples it (APP), in MB; the
    components of ``skip`` left out."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = csv.DictReader(whole_lines(f, path, diag))
        _need(path, csv_header(rows, path), ("Component", "Timestamp(us)"))
        for line, row in enumerate(csv_rows(rows, path, diag), start=2):
            try:
                ts_ns = _us_to_ns(row.get("Timestamp(us)"), rank)
                values = [_megabytes(row.get(column)) for column in _RECORD_KINDS]
            except (ValueError, ArithmeticError):
                diag.warn("bad_row", f"{path}: line {line}: expected a Timestamp(us), totals in MB; skipped")
                continue
            component = (row.get("Component") or "?").strip()
            if component in skip:
                continue
            for kind, value in zip(MEMORY_KINDS, values, strict=True):
                if value is not None:
                    yield Sample(rank.rank, memory_counter(component, kind), ts_ns, value)


def _npu_module_mem(rank: RankInfo, path: Path, diag: Diagnostics) -> Iterator[Sample]:
    """npu_module_mem.csv: each CANN module's reserved device memory (MB) as the driver samples it,
    on the lane the database's ``NPU_MODULE_MEM`` draws it on (``ascend_db.module_memory_lane``), in bytes."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = csv.DictReader(whole_lines(f, path, diag))
        missing = {"Component", "Timestamp(us)", "Total Reserved(MB)"} - set(csv_header(rows, path))
        if missing:  # module memory is drawn only: its absence costs no peak
            diag.warn("bad_memory", f"{path}: no column {', '.join(sorted(missing))} in the header; "
                      "not drawn")
            return
        for line, row in enumerate(csv_rows(rows, path, diag), start=2):
            try:
                ts_ns = _us_to_ns(row.get("Timestamp(us)"), rank)
                value = _megabytes(row.get("Total Reserved(MB)"))
            except (ValueError, ArithmeticError):
                diag.warn("bad_row", f"{path}: line {line}: expected a Timestamp(us) and Total Reserved(MB); "
                          "skipped")
                continue
            if value is not None:
                yield Sample(rank.rank, ascend_db.module_memory_lane((row.get("Component") or "?").strip()),
                             ts_ns, value)


_ALLOCATION_TOTALS = tuple(f"Allocation Total {kind}(MB)" for kind in MEMORY_KINDS)
_RELEASE_TOTALS = tuple(f"Release Total {kind}(MB)" for kind in MEMORY_KINDS)


def _operator_memory(rank: RankInfo, path: Path, diag: Diagnostics) -> Iterator[op_memory.Allocation]:
    """operator_memory.csv: one allocation a row, sizes in KB, totals in MB (``op_memory``)."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = csv.DictReader(whole_lines(f, path, diag))
        _need(path, csv_header(rows, path), ("Name", "Size(KB)", "Allocation Time(us)", "Release Time(us)"))
        for line, row in enumerate(csv_rows(rows, path, diag), start=2):
            try:
                allocated = _us_to_ns(row.get("Allocation Time(us)"), rank)
                release = (row.get("Release Time(us)") or "").strip()
                released = _us_to_ns(release, rank) if release else None
                size = float(row["Size(KB)"]) * 1024
                at_allocation = tuple(_megabytes(row.get(c)) for c in _ALLOCATION_TOTALS)
                at_release = tuple(_megabytes(row.get(c)) for c in _RELEASE_TOTALS)
            except (ValueError, ArithmeticError, TypeError):
                diag.warn("bad_row", f"{path}: line {line}: expected Size(KB), times in µs and totals in MB; "
                          "skipped")
                continue
            component = op_memory.PTA if (row.get("Stream Ptr") or "").strip() else op_memory.GE
            yield op_memory.Allocation(row.get("Name") or "?", size, component, allocated, released,
                                       at_allocation, at_release)


def _us_to_ns(text: str | None, rank: RankInfo) -> int:
    """A time cell (µs, with its trailing TAB) as the rank's epoch ns."""
    return checked_ns(times.us_to_ns((text or "").strip()) + rank.clock_offset_ns)


def _megabytes(text: str | None) -> float | None:
    """Bytes of a cell in MB; None where it is empty (GE records no Active)."""
    text = (text or "").strip()
    return float(text) * _MB if text else None


def _need(path: Path, header: list[str], columns: tuple[str, ...]) -> None:
    missing = [c for c in columns if c not in header]
    if missing:
        raise InputError(path, "line 1", f"no column {', '.join(missing)} in the header",
                         hint="expected torch_npu's memory files")


def links(rank: RankInfo, diag: Diagnostics) -> tuple[str, Iterator[MatrixLink]] | None:
    """The link matrix the profiler wrote beside the rank's records (``ascend_analysis.links``)."""
    output = rank.path / _OUTPUT if (rank.path / _OUTPUT).is_dir() else rank.path
    return ascend_analysis.links(rank, output, diag)


_CPU_OPS = "cpu_op_execute_timestamp"


def with_op_types(rank: RankInfo) -> RankInfo:
    """The rank as read for its op types (``trace2perfetto ops``): from kernel_details.csv where
    trace_view.json would be read, since that names only each task's type (AI_CORE for cube and
    vector kernels alike), not its op type, core or shapes; a MindSpore CPU run's (no device
    tasks) from its ``FRAMEWORK/cpu_op_execute_timestamp_N.txt``, every CPU op run to the ns with
    its type; else as it is."""
    source = rank.source_paths[0] if rank.source_paths else None
    if source is None or source.name != "trace_view.json":
        return rank
    kernels = source.parent / "kernel_details.csv"
    if kernels.is_file():
        return dataclasses.replace(rank, source_paths=(kernels,))
    cpu = mindspore_cpu.framework_file(rank.path, _CPU_OPS, rank.rank)
    return rank if cpu is None else dataclasses.replace(rank, source_paths=(cpu,))


def kernel_types(rank: RankInfo, diag: Diagnostics) -> Iterator[tuple[int, int, dict[tuple[int, str], str]]]:
    """Where the rank is read from trace_view.json and kernel_details.csv is beside it, its compute
    kernels' op types (``Type``), which trace_view.json lacks, keyed by (start ns on the rank's
    clock, name): one kernel in both files, as both write its start to the ns (µs with 3
    decimals; kernel_details' with a TAB) and its name alike. One kernel_details step at a time in
    time order, each with its first start and last end (the caller's window); nothing elsewhere."""
    kernels = with_op_types(rank)
    if kernels.source_paths[0].name != "kernel_details.csv":
        return
    for batch in _read_kernel_details(kernels, kernels.source_paths[0], diag, detail=False):
        typed = [s for s in batch.slices
                 if s.layer is Layer.STREAM and type(s.args) is dict and "Type" in s.args]
        if typed:
            offset = rank.clock_offset_ns
            yield (min(s.start_ns for s in typed) + offset, max(s.end_ns for s in typed) + offset,
                   {(s.start_ns + offset, s.name): s.args["Type"] for s in typed})


_NEEDED = ("Name", "Accelerator Core", "Start Time(us)", "Duration(us)")
_KEPT = ("Type", "Accelerator Core", "Task ID", "Stream ID", "Model ID", "Block Dim", "Input Shapes",
         "Output Shapes")  # the args worth showing; the many PMU columns are left out
_COMMUNICATION = ("HCCL", "COMMUNICATION")


def _read_kernel_details(
    rank: RankInfo, path: Path, diag: Diagnostics, detail: bool
) -> Iterator[StepRecords]:
    """kernel_details.csv, filed by ``Step Id`` in a spill file, then one step at a time; in detail,
    each communication op with the profiler's figures of it where its analysis lies beside
    (``_Analysed``)."""
    bounds: dict[int | None, list[int]] = {}
    # the figures are for comm's detail read; a summary read (ops' op types, the critical path's
    # kernel types beside trace_view.json) holds nothing of them, in flat memory
    analysed = _Analysed(rank, path.parent, diag) if detail else None
    with StepSpill() as spill, open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = csv.DictReader(whole_lines(f, path, diag))
        missing = [c for c in _NEEDED if c not in csv_header(rows, path)]
        if missing:
            raise InputError(path, "line 1", f"no column {', '.join(missing)} in the header",
                             hint="expected torch_npu's kernel_details.csv")
        batch: dict[int | None, list[Slice]] = {}
        line = 1
        for line, row in enumerate(csv_rows(rows, path, diag), start=2):
            record = _kernel(row, rank, path, line, diag, detail)
            if record is None:
                continue
            step = _int_or_none(row.get("Step Id"))
            if analysed is not None and record.layer is Layer.COMM_OP:
                record = analysed.figured(step, record)
            bound = bounds.setdefault(step, [record.start_ns, record.end_ns])
            bound[0], bound[1] = min(bound[0], record.start_ns), max(bound[1], record.end_ns)
            batch.setdefault(step, []).append(record)
            if line % 5_000 == 0:  # a few MiB of records in memory, whatever the file's size
                _flush(spill, batch)
        _flush(spill, batch)
        if not bounds:
            _say_nothing_read(path, line - 1, rank, diag, detail)
        for step_id in sorted(bounds, key=lambda k: bounds[k][0]):
            start, end = bounds[step_id]
            slices = spill.load(step_id, rank.rank)
            step = None
            if step_id is not None:
                step = Step(None, step_id, start, end, host_start=False)  # Preparing: unknown
                slices.append(Slice(rank.rank, Layer.STEP, "Steps", f"Step {step_id}", start, end - start,
                                    {"Step": step_id, "bounds": "first to last device activity"}))
            yield StepRecords(rank.rank, None, step_id, step, slices)


def _figured_without_planes(rank: RankInfo, output: Path, steps: Iterator[StepRecords],
                            diag: Diagnostics) -> Iterator[StepRecords]:
    """trace_view.json's steps, the communication ops of a step without HCCL plane tasks (profiler
    level 0, or planes not written) with the profiler's figures of them where its analysis lies
    beside (``_Analysed``): without it, their Transit, Wait, Synchronization and Idle are unknown."""
    if not _comm_analysis(output):
        yield from steps  # nothing to join: no pass over the slices
        return
    analysed = None
    for batch in steps:
        layers = {s.layer for s in batch.slices}
        if Layer.COMM_OP in layers and Layer.COMM_TASK not in layers:
            analysed = analysed or _Analysed(rank, output, diag, shifted=True)
            batch.slices = [analysed.figured(batch.step_id, s) if s.layer is Layer.COMM_OP else s
                            for s in batch.slices]
        yield batch


def _comm_analysis(output: Path) -> tuple[Path, ...]:
    """The profiler's analysis files beside a rank's records that hold its communication ops."""
    return tuple(p for p in ascend_analysis.sources(output) if p.name != ascend_analysis.STEP_TRACE)


class _Analysed:
    """The profiler's figures of each communication op (``communication.json``, ``analysis.db``:
    Transit, Wait, Synchronization, Idle, per transport), which kernel_details.csv and a
    trace_view.json without plane tasks lack, for their ops: the op of the same step and name whose
    start is nearest, within ``_NEAR_NS`` (the analysis writes starts as floats of epoch µs, a
    0.25 µs grain). ``shifted``: the ops' times are on the rank's clock already (trace_view.json's),
    not yet (kernel_details.csv's)."""

    def __init__(self, rank: RankInfo, output: Path, diag: Diagnostics, shifted: bool = False) -> None:
        self.ops: dict[tuple[int | None, str], list[Slice]] = {}
        self.offset = 0 if shifted else rank.clock_offset_ns  # the analysis' times are shifted by it
        paths = _comm_analysis(output)
        if not paths:
            return
        try:
            _, by_step = ascend_analysis.analysed(rank, paths, diag)
        except InputError as e:  # a broken analysis costs the ops their figures, not the rank
            diag.warn("bad_analysis", f"{e}; rank {rank.rank}'s communication ops keep Transit, Wait, "
                      "Synchronization and Idle unknown")
            return
        for step, ops in by_step.items():
            for op in ops:
                self.ops.setdefault((step, op.name), []).append(op)

    def figured(self, step: int | None, op: Slice) -> Slice:
        """``op`` with the figures of its analysed op in its args (as they were: none found)."""
        found = self.ops.get((step, op.name))
        if not found:
            return op
        nearest = min(found, key=lambda o: abs(o.start_ns - self.offset - op.start_ns))
        if abs(nearest.start_ns - self.offset - op.start_ns) > _NEAR_NS:
            return op
        figures = {k: v for k, v in nearest.args.items() if k not in ("type",)}
        args = op.args if op.args is None or type(op.args) is dict else decoded_args(op.args)
        return op._replace(args={**(args or {}), **figures})


_NEAR_NS = 1_000


def _say_nothing_read(path: Path, rows: int, rank: RankInfo, diag: Diagnostics, detail: bool) -> None:
    """kernel_details.csv gave no record: the rank is left out of the output, and the user told why."""
    kind = "nothing_read"
    if not rows:
        why = "no kernel rows, only its header (the profiler wrote nothing, or the job stopped first)"
    elif detail:
        why = f"none of its {rows} rows could be read (warned above)"
    else:  # rows that could not be read are warned of apart: the rest were left out by design
        kind, why = NOTHING_DRAWN, (f"none of its {rows} rows is a compute kernel or a communication op (the "
                                    "others are drawn with --kind detail), or could be read")
    diag.warn(kind, f"{path}: {why}; rank {rank.rank} has nothing to show")


def _kernel(row: dict[str, str], rank: RankInfo, path: Path, line: int, diag: Diagnostics,
            detail: bool) -> Slice | None:
    core = (row.get("Accelerator Core") or "").strip()
    communication = core in _COMMUNICATION
    if not detail and not communication and not is_compute(core):
        return None
    try:  # a row cut short (the job crashed) lacks its last columns: None
        start_ns = times.us_to_ns((row.get("Start Time(us)") or "").strip())
        dur_ns = times.us_to_ns((row.get("Duration(us)") or "").strip())
    except (ValueError, ArithmeticError):
        diag.warn("bad_row", f"{path}: line {line}: expected Start Time(us) and Duration(us); skipped")
        return None
    if dur_ns < 0:
        diag.warn("bad_row", f"{path}: line {line}: negative duration; skipped")
        return None
    values = {key: (row.get(key) or "").strip() for key in _KEPT}
    args = {key: value for key, value in values.items() if value not in ("", "N/A")}
    name = row.get("Name") or "?"
    if communication:
        return Slice(rank.rank, Layer.COMM_OP, "Communication", name, start_ns, dur_ns, args,
                     comm_type(collectives.hccl(name), collectives.hccl_group(name)))
    lane = f"Stream {values['Stream ID'] or '?'}"
    return Slice(rank.rank, Layer.STREAM, lane, name, start_ns, dur_ns, args, core)


def _flush(spill: StepSpill, batch: dict[int | None, list[Slice]]) -> None:
    for step, slices in batch.items():
        spill.add(step, slices)
    batch.clear()


def _int_or_none(text: str | None) -> int | None:
    try:
        return checked_id(int((text or "").strip()))
    except ValueError:
        return None


def _collection_start_ns(info: dict[str, Any]) -> int | None:
    """Epoch ns of the collection start: its end, less the monotonic time it lasted."""
    try:
        end = info["end_info"]
        duration = int(end["MonotonicTimeEnd"]) - int(info["start_info"]["start_monotonic"])
        return checked_ns(int(end["collectionTimeEnd"]) - duration)
    except (KeyError, TypeError, ValueError, ArithmeticError):
        return None  # not known


READER = Reader(
    name=NAME,
    folder="*_ascend_pt/ or *_ascend_ms/ with ASCEND_PROFILER_OUTPUT/trace_view.json, or a folder with "
           "trace_view.json and kernel_details.csv",
    sniff=sniff, rank_infos=rank_infos, read=read,
    lone_files=("trace_view.json", "kernel_details.csv", "ascend_pytorch_profiler_*.db"), lone_file=lone_file,
    missing_data=missing_data, memory=memory, with_op_types=with_op_types, kernel_types=kernel_types,
    links=links,
)
