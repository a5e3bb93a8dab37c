"""Conservation, as a property of the whole pipeline (issue 23): for every generator and the shapes
real jobs have (several ranks, several graphs, pipeline stages, a mixed fleet, metadata last,
events out of order, gzip, cut-off files), every record the input holds lands in the detail
output exactly once, or in a warning that counts it; and the summary and the overlap report hold
every step of every rank.

The truth never comes from the converter:
- Chrome-trace inputs (torch_npu's ``trace_view.json``, Kineto, Paddle): this test reads the files
  itself with orjson and counts their slices (``X``) and instants (``i``) per rank. All of them
  are records; only torch_npu's *Overlap Analysis* lanes are left aside, as the converter draws
  its own from the tasks (compared with the profiler's own lanes in ``test_multi_graph.py`` and
  ``test_comm.py``). A file cut off by a crash holds the events before the cut: the test finds the
  last whole one by closing the JSON itself.
- Other inputs: the generators' counts of what they wrote (device tasks, plane tasks, ops; rows
  of the database's tables read with sqlite3).
The output is decoded by ``trace_check.read_perfetto`` (the official protobuf schema), its slices
counted per rank, the converter's own Overlap Analysis lanes left aside.
"""

from __future__ import annotations

import json
import re
import sqlite3
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import launch_truth
import orjson
import pytest
from test_trace_processor import imported
from trace_check import read_perfetto

from converters import Diagnostics, Layer, Options, convert, discover, read_profile
from converters.cli import main
from converters.model import comm_kind
from fixtures.ascend_db_gen import write_ascend_db
from fixtures.ascend_pt_gen import write_ascend_pt_profile
from fixtures.kineto_gen import write_kineto_traces
from fixtures.mindspore1x_gen import write_mindspore1x_profile
from fixtures.mindspore_cpu_gen import write_mindspore2_cpu_profile
from fixtures.msprof_gen import write_msprof_profile
from fixtures.nsys_gen import write_nsys_export
from fixtures.paddle_gen import generate_profile
from fixtures.rocprof_gen import write_rocprof
from fixtures.xplane_gen import write_xspace

DRAWN = "Overlap Analysis"  # the converter's own lanes, computed from the records
ALL = "every group"  # a truth of all the output's groups but DRAWN
_BASE = re.compile(rb'"baseTimeNanoseconds": (\d+)')


@dataclass
class Truth:
    """What one profile holds: per rank, the records each output group must show (``ALL``: all of
    them together), and the steps (graph, step) as the rank numbers them; ``cut``: a file of it is
    cut off, so the records are those before the cut, and a warning must say so; ``unbounded``:
    ranks with only the profiler's analysis, whose steps are in the overlap report but not drawn."""

    records: dict[int, dict[str, int]]
    steps: dict[int, set[tuple[int | None, int]]]
    cut: bool = False
    unbounded: frozenset[int] = frozenset()  # ranks whose steps have no bounds to draw (analysis only)
    kineto: dict[int, Path] | None = None  # Kineto ranks' traces, whose device work is read by launch


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Path], Truth]

    def __repr__(self) -> str:
        return self.name


# -- the truth of Chrome-trace inputs, read here ---------------------------------------------------

def _events(path: Path) -> list[dict]:
    """The whole events of a Chrome trace (an array, or an object's ``traceEvents``), also of a file
    cut off inside an event: closed after the last event that ends before the cut."""
    data = path.read_bytes()
    if path.suffix == ".gz":  # whole or cut off: what inflates
        data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = _closed(data)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _closed(data: bytes) -> list | dict:
    """The cut-off document closed after its last whole event: try each '}' from the end."""
    end = len(data)
    while (end := data.rfind(b"}", 0, end)) > 0:
        for tail in (b"]}", b"]"):
            try:
                doc = orjson.loads(data[:end + 1] + tail)
            except orjson.JSONDecodeError:
                continue
            events = doc.get("traceEvents") if isinstance(doc, dict) else doc
            if isinstance(events, list) and events and isinstance(events[-1], dict) and "ph" in events[-1]:
                return doc
    raise AssertionError("no whole event before the cut")


def _records(events: list[dict], left_aside: str | None = None) -> int:
    """Slices and instants, but those of the process named ``left_aside``."""
    names = {e.get("pid"): e.get("args", {}).get("name") for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    return sum(1 for e in events if e.get("ph") in ("X", "i", "I")
               and (left_aside is None or names.get(e.get("pid")) != left_aside))


# -- the profiles -----------------------------------------------------------------------------------

def _msprof(root: Path, **kw) -> Truth:
    made = write_msprof_profile(root, **kw)
    return Truth({r.rank: {"Ascend Hardware": r.device_tasks, "Communication": r.hccl_tasks + r.hccl_ops}
                  for r in made.ranks},
                 {r.rank: {(g, s) for g in r.graphs for s in range(1, r.steps + 1)} for r in made.ranks})


def _ascend_pt(root: Path, **kw) -> Truth:
    made = write_ascend_pt_profile(root, **kw)
    return Truth({r.rank: _analysis_ops(r.path) if r.analysis_only else
                  {ALL: _records(_events(next(r.path.rglob("trace_view.json"))), DRAWN)} for r in made.ranks},
                 {r.rank: {(None, s) for s in r.steps} for r in made.ranks},
                 unbounded=frozenset(r.rank for r in made.ranks if r.analysis_only))


def _analysis_ops(rank_dir: Path) -> dict[str, int]:
    """A rank with only the profiler's analysis: its records are the ops of communication.json
    (``{step: {kind: {op: ..., "Total Op Info": sums}}}``)."""
    document = orjson.loads(next(rank_dir.rglob("communication.json")).read_bytes())
    return {"Communication": sum(name != "Total Op Info" for kinds in document.values()
                                 for ops in kinds.values() for name in ops)}


def _ascend_db(root: Path) -> Truth:
    records, steps = {}, {}
    for rank in (0, 1):
        folder = root / f"rank{rank}_ascend_pt"  # as torch_npu lays it out
        made = write_ascend_db(folder / "ASCEND_PROFILER_OUTPUT", rank=rank, seed=rank)
        (folder / f"profiler_info_{rank}.json").write_text(f'{{"rank_id": {rank}}}')
        with sqlite3.connect(made["file"]) as db:
            host = db.execute("SELECT count(*) FROM CANN_API").fetchone()[0]
            steps[rank] = {(None, s) for (s,) in db.execute("SELECT id FROM STEP_TIME")}
        records[rank] = {"Ascend Hardware": made["device_tasks"],
                         "Communication": made["comm_tasks"] + made["comm_ops"], "Host": host,
                         "Step Trace": made["steps"]}
    return Truth(records, steps)


def _mindspore1x(root: Path, **kw) -> Truth:
    made = write_mindspore1x_profile(root, **kw)
    return Truth({r.rank: {"Ascend Hardware": r.device_ops + r.aicpu_ops,
                           "Communication": r.hccl_tasks + r.comm_ops} for r in made.ranks},
                 {r.rank: {(None, s) for s, _, _ in r.step_bounds_ns} for r in made.ranks})


def _mindspore2_cpu(root: Path, **kw) -> Truth:
    made = write_mindspore2_cpu_profile(root, **kw)
    events = _events(made.folder / f"cpu_timeline_display_{made.rank}.json")
    drawn = sum(1 for e in events if e.get("ph") == "X" and str(e.get("pid")) != "12000")  # not its overlap
    return Truth({made.rank: {ALL: drawn}}, {made.rank: {(None, s) for s in made.steps}})


def _kineto(root: Path, **kw) -> Truth:
    made = write_kineto_traces(root, **kw)
    records, steps, cut = {}, {}, False
    for entry, path in zip(made.manifest["rank_files"], made.paths, strict=True):
        events = _events(path)
        records[entry["rank"]] = {ALL: _records(events)}
        steps[entry["rank"]] = {(None, int(e["name"][13:])) for e in events
                                if e.get("ph") == "X" and str(e.get("name")).startswith("ProfilerStep#")
                                and e.get("cat") == "user_annotation"}
        cut |= entry["truncated_at"] is not None
    paths = {entry["rank"]: path for entry, path in zip(made.manifest["rank_files"], made.paths, strict=True)}
    return Truth(records, steps, cut, kineto=None if cut else paths)


def _kineto_keys_last(root: Path) -> Truth:
    """Kineto traces rewritten with every key after ``traceEvents`` (valid JSON: key order means
    nothing; ``distributedInfo`` and ``baseTimeNanoseconds`` last), each rank's under the other's
    name (``rank1.pt.trace.json`` holds rank 0): the ranks come from the keys, wherever they lie,
    never from the names."""
    truth = _kineto(root / "written", ranks=2, steps=3, seed=6)
    paths = sorted((root / "written").iterdir())
    for path in paths:
        document = orjson.loads(path.read_bytes())
        rank = document["distributedInfo"]["rank"]
        if rank == 1:  # a few host events fewer, so that ranks taken for each other show
            ops = [i for i, e in enumerate(document["traceEvents"]) if e.get("cat") == "cpu_op"][:5]
            document["traceEvents"] = [e for i, e in enumerate(document["traceEvents"]) if i not in ops]
            truth.records[rank][ALL] -= len(ops)
        moved = {"traceEvents": document.pop("traceEvents"), **document}
        (root / f"rank{1 - rank}.pt.trace.json").write_bytes(orjson.dumps(moved))
    for path in paths:
        path.unlink()
    (root / "written").rmdir()
    truth.kineto = {rank: root / f"rank{1 - rank}.pt.trace.json" for rank in truth.records}  # where they went
    return truth


def _paddle(root: Path, **kw) -> Truth:
    made = generate_profile(root, **kw)
    records, steps = {}, {}
    for f in made.files:
        records[f.rank] = {ALL: _records(_events(f.path))}
        steps[f.rank] = {(None, s.number) for s in f.steps}
    return Truth(records, steps, any(f.truncated_at is not None for f in made.files))


def _nsys(root: Path) -> Truth:
    """Two Nsight Systems exports (rows shuffled), no step marker: each capture one step."""
    records = {}
    for rank in (0, 1):
        counts = write_nsys_export(root / f"rank{rank}.sqlite", rank=rank, steps=2, seed=rank)["counts"]
        records[rank] = {"GPU": counts["KERNEL"] - 2 + counts["MEMCPY"] + counts["MEMSET"]
                         + counts["SYNCHRONIZATION"], "Communication": 2,  # an NCCL kernel a step
                         "Host": counts["RUNTIME"] + counts["NVTX"] + counts["OSRT"]}
    return Truth(records, {0: set(), 1: set()})


def _nsys_processes(root: Path) -> Truth:
    """One export of two processes (2026.2's shape): a rank each; the launcher's rows in none."""
    made = write_nsys_export(root / "job.sqlite", processes=2, steps=2, seed=5)["processes"]
    records = {}
    for rank, counts in enumerate(p["counts"] for p in made):
        records[rank] = {"GPU": counts["KERNEL"] - 2 + counts["MEMCPY"] + counts["MEMSET"]
                         + counts["SYNCHRONIZATION"], "Communication": 2,
                         "Host": counts["RUNTIME"] + counts["NVTX"] + counts["OSRT"]}
    return Truth(records, {0: set(), 1: set()})


def _xplane(root: Path, **kw) -> Truth:
    """A JAX XSpace: each rank's device events and its share of the host's (the generator counts
    them as it writes), and a Step slice each step on every rank."""
    made = write_xspace(root, **kw)
    return Truth({r.rank: {ALL: r.device_events + r.host_events + len(r.steps)} for r in made.ranks},
                 {r.rank: {(None, s) for s in r.steps} for r in made.ranks})


def _rocprof(root: Path, **kw) -> Truth:
    """Counted from each file's JSON: its kernels, copies, HIP and RCCL calls and rocTX ranges."""
    made = write_rocprof(root, **kw)
    records = {}
    for f in made.files:
        data = f.path.read_bytes()
        data = zlib.decompress(data, 31) if f.path.suffix == ".gz" else data
        [tool] = json.loads(data)["rocprofiler-sdk-tool"]
        arrays = ("kernel_dispatch", "memory_copy", "hip_api", "marker_api", "rccl_api")
        records[f.rank] = {ALL: sum(len(tool["buffer_records"].get(k, [])) for k in arrays)}
    return Truth(records, {f.rank: set() for f in made.files})  # no --step-marker: no steps


def _mixed_fleet(root: Path) -> Truth:
    """Ascend ranks 0-1 and the GPU rank 2 of one run: the Kineto trace moved to when they ran (its
    times count from its ``baseTimeNanoseconds``)."""
    npu = _ascend_pt(root / "npu", ranks=2, steps=2, seed=5)
    made = write_kineto_traces(root / "gpu", ranks=3, steps=2, seed=5)
    gpu = root / made.paths[2].name
    data = made.paths[2].read_bytes()
    base = int(_BASE.search(data)[1])
    start = max(r.start_ns for r in discover(root / "npu"))
    shift = start + 10**9 - discover(made.paths[2])[0].start_ns
    gpu.write_bytes(_BASE.sub(b'"baseTimeNanoseconds": %d' % (base + shift), data, count=1))
    for path in made.paths:
        path.unlink()
    (root / "gpu").rmdir()
    events = _events(gpu)
    npu.records[2] = {ALL: _records(events)}
    npu.steps[2] = {(None, int(e["name"][13:])) for e in events if e.get("cat") == "user_annotation"
                    and str(e.get("name")).startswith("ProfilerStep#")}
    return npu


CASES = [
    Case("msprof, 2 ranks", lambda root: _msprof(root, ranks=2, steps=3)),
    Case("msprof, 4 ranks, graphs one after the other numbered apart, CANN 8 text",
         lambda root: _msprof(root, ranks=4, graphs=(2, 5), odd_rank_graphs=(0, 3), graphs_in_turn=False,
                              ranks_per_host=2, layout="cann8", tasks_per_step=30, seed=3)),
    Case("msprof, graphs in turn, files in slices",
         lambda root: _msprof(root, ranks=2, graphs=(2, 5), slices=2, seed=4)),
    Case("torch_npu, 2 ranks", lambda root: _ascend_pt(root, ranks=2, steps=3)),
    Case("torch_npu, 4 ranks in 2 pipeline stages",
         lambda root: _ascend_pt(root, ranks=4, pp=2, steps=2, seed=1)),
    Case("torch_npu, 4 ranks in 2 pipeline stages, ranks 1 and 3 with only the profiler's analysis",
         lambda root: _ascend_pt(root, ranks=4, pp=2, steps=2, analysis_only=(1, 3), seed=1)),
    Case("MindSpore 2.x, metadata last",
         lambda root: _ascend_pt(root, ranks=2, framework="ms", metadata_last=True, seed=2)),
    Case("torch_npu database, 2 ranks", _ascend_db),
    Case("MindSpore 1.x, 2 ranks", lambda root: _mindspore1x(root, ranks=2, steps=3)),
    Case("MindSpore 1.x, 4 ranks in 2 pipeline stages",
         lambda root: _mindspore1x(root, ranks=4, pp=2, seed=1)),
    Case("MindSpore 1.x, the device timeline ends in step 2",
         lambda root: _mindspore1x(root, ranks=2, steps=4, timeline_ends_in_step=2, seed=2)),
    Case("MindSpore 1.x, no AI CPU file, HCCL on one line",
         lambda root: _mindspore1x(root, ranks=2, aicpu="none", hccl_one_line=True, seed=3)),
    Case("MindSpore 2.0 on CPU, shuffled", lambda root: _mindspore2_cpu(root, steps=4, shuffle=True, seed=1)),
    Case("Kineto, 2 ranks", lambda root: _kineto(root, ranks=2, steps=3)),
    Case("Kineto, shuffled, metadata last, gzip",
         lambda root: _kineto(root, ranks=2, steps=2, shuffle=True, metadata_last=True, gzip=True, seed=1)),
    Case("Kineto, distributedInfo and the clock base after the events, files named the other way",
         _kineto_keys_last),
    Case("Kineto, cut off", lambda root: _kineto(root, ranks=2, steps=3, truncate=True, seed=2)),
    Case("Kineto, gzip cut off",
         lambda root: _kineto(root, ranks=2, steps=3, truncate=True, gzip=True, seed=3)),
    Case("Kineto, the device a step behind its host",
         lambda root: _kineto(root, ranks=2, steps=3, device_lag_ns=450_000_000, seed=6)),
    Case("Kineto, kernels launched between the steps and after the last",
         lambda root: _kineto(root, ranks=2, steps=3, unstepped_kernels=3, seed=7)),
    Case("Kineto, RCCL's generic collective kernels, a step behind",
         lambda root: _kineto(root, ranks=2, steps=2, nccl="rccl", device_lag_ns=200_000_000, seed=8)),
    Case("Kineto, a serving trace without step markers",
         lambda root: _kineto(root, ranks=2, steps=2, no_steps=True, seed=9)),
    Case("Kineto, SymmetricMemory all-reduce kernels",
         lambda root: _kineto(root, ranks=2, steps=2, nccl="symm", seed=10)),
    Case("Kineto, CPU gloo running past its step",
         lambda root: _kineto(root, ranks=2, steps=3, cpu_gloo=True, gloo_overrun_ns=300_000_000, seed=4)),
    Case("Paddle, GPU", lambda root: _paddle(root, steps=4)),
    Case("Paddle, 2 ranks, user ranges, recompute, shuffled",
         lambda root: _paddle(root, ranks=2, steps=3, user_ranges=True, recompute=True, shuffle=True,
                              seed=1)),
    Case("Paddle, cut off", lambda root: _paddle(root, steps=4, truncate=True, seed=2)),
    Case("Nsight Systems exports, 2 ranks, rows shuffled", _nsys),
    Case("Nsight Systems, one export of 2 processes", _nsys_processes),
    Case("JAX XSpace, 2 GPUs, step annotations, RCCL", lambda root: _xplane(root, steps=3)),
    Case("JAX XSpace, 2 hosts, planes, lines and events shuffled",
         lambda root: _xplane(root, hosts=2, devices=3, steps=2, shuffle=True, seed=1)),
    Case("JAX XSpace, no steps", lambda root: _xplane(root, step_annotations=False, seed=2)),
    Case("JAX XSpace, TPU planes, the device's Steps line",
         lambda root: _xplane(root, platform="tpu", devices=4, steps=3, step_annotations=False)),
    Case("JAX XSpace, TPU planes, step annotations, shuffled",
         lambda root: _xplane(root, platform="tpu", hosts=2, devices=2, steps=2, shuffle=True, seed=4)),
    Case("rocprofv3, 2 ranks, shuffled, gzip, RCCL calls",
         lambda root: _rocprof(root, ranks=2, shuffle=True, gzip=True, rccl="hip")),
    Case("mixed fleet: Ascend ranks and a GPU rank of one run", _mixed_fleet),
]


@pytest.fixture(scope="module", params=CASES, ids=repr)
def profile(request, tmp_path_factory) -> tuple[Path, Truth]:
    root = tmp_path_factory.mktemp("profile")
    return root, request.param.make(root)


def _by_rank(trace) -> dict[int, Counter]:
    groups: dict[int, Counter] = {}
    for s in trace.slices:
        if s.track[0] != DRAWN:
            groups.setdefault(int(s.process.split()[1]), Counter())[s.track[0]] += 1
    return groups


def test_every_record_lands_once_in_detail(profile, out_dir):
    root, truth = profile
    result = convert(root, out_dir / "detail.pftrace", kind="detail", max_bytes=None)
    written = _by_rank(read_perfetto((out_dir / "detail.pftrace").read_bytes()))
    shown = {rank: {group: sum(mine.values()) if group == ALL else mine[group] for group in groups}
             for rank, groups in truth.records.items() for mine in [written.get(rank, Counter())]}
    assert shown == truth.records, result.warnings
    assert any("cut off" in w for w in result.warnings) == truth.cut


def test_summary_and_overlap_hold_every_step_of_every_rank(profile, out_dir, capsys):
    root, truth = profile
    convert(root, out_dir / "summary.pftrace", kind="summary")
    steps: dict[int, Counter] = {}
    for s in read_perfetto((out_dir / "summary.pftrace").read_bytes()).slices:
        if s.track[0] == "Step Trace" and s.name.startswith("Step "):
            steps.setdefault(int(s.process.split()[1]), Counter())[int(s.name.split()[1])] += 1
    assert steps == {rank: Counter(step for _, step in mine) for rank, mine in truth.steps.items()
                     if rank not in truth.unbounded and mine}  # a rank without steps draws none
    capsys.readouterr()
    assert main(["overlap", str(root), "--format", "json", "-q"]) == 0
    rows = json.loads(capsys.readouterr().out)
    covered = {(row["Rank"], row["Graph"], row["Step"]) for row in rows if row["Step"] is not None}
    assert covered == {(rank, graph, step) for rank, mine in truth.steps.items() for graph, step in mine}


# record_param_comms' "Collective name" -> the model's kind (converters.model), written out here
_KINDS = {"allreduce": "allreduce", "broadcast": "broadcast", "allgather": "allgather"}


def test_kineto_device_work_is_filed_to_the_step_that_launched_it(profile, out_dir, capsys):
    """Per step, Computing is the union of the compute kernels the step launched (the truth joins
    kernels to launches by correlation id, ``launch_truth``), wherever they ran; no share of the
    report exceeds its step; a collective's kernel has the kind its record_param_comms names."""
    root, truth = profile
    if not truth.kineto:
        pytest.skip("not a whole Kineto profile")
    found = {rank: launch_truth.read(path) for rank, path in truth.kineto.items()}
    capsys.readouterr()
    assert main(["overlap", str(root), "--format", "json", "-q"]) == 0
    for row in json.loads(capsys.readouterr().out):
        mine = found[row["Rank"]]
        if not mine.kernels:
            continue
        if row["Step"] is not None:
            expected = mine.computing_ns()[row["Step"]]
        elif not mine.steps:  # a trace without steps: one row of all its work
            expected = mine.computing_all_ns()
        else:
            continue
        assert row["Computing"] == round(expected / 1000, 3), (row["Rank"], row["Step"])
    assert main(["report", str(root), "--format", "json", "-o", str(out_dir / "report.json"), "-q"]) == 0
    for step in json.loads((out_dir / "report.json").read_text())["steps"]:
        for key in ("computing_ms", "communication_ms", "free_ms", "preparing_ms", "other_ms"):
            assert step[key] is None or step[key] <= step["step_ms"] + 1e-6, (step["rank"], step["step"], key)
    kinds = {(rank, k.start_ns): _KINDS[k.collective] for rank, t in found.items() for k in t.kernels
             if k.collective is not None}
    infos = discover(root)
    typed = {(info.rank, s.start_ns - info.clock_offset_ns): comm_kind(s)
             for batch in read_profile(infos, Options(kind="detail"), Diagnostics())
             for info in infos if info.rank == batch.rank
             for s in batch.slices if s.layer is Layer.COMM_OP}
    assert {key: typed.get(key) for key in kinds} == kinds
    for name in ("launched.pftrace", "launched.json"):  # steps whose times overlap import clean
        convert(root, out_dir / name, kind="detail", max_bytes=None)
        assert imported(out_dir / name, out_dir)[0] == [], name
