"""``diff --by op``: device time by the framework op that launched the kernels (docs/analysis.md,
"diff"). A real torch_npu rank against a real Kineto rank, checked against the links read
independently from the traces with orjson; a Kineto trace against itself; which real samples link
their kernels to framework ops (the database form's, checked against an SQL query of its own);
the grouping's algebra (every kernel in exactly one row, under the outermost framework op of its
launch); the command end to end."""

from __future__ import annotations

import csv
import gzip
import json
import re
import sqlite3
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import jsonschema
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.analyses import diff
from converters.analyses.diff import FAMILY, FRAMEWORK_OP, KERNEL, Side, StepSample, compare, diff_report
from converters.analyses.launches import Launchers
from converters.cli import main
from converters.errors import Diagnostics
from converters.model import GPU_KERNEL, Layer, Slice, StepRecords
from tests.conftest import real_data

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "diff.schema.json").read_text())
NAMESPACED = re.compile(r"^[A-Za-z_]\w*::")
NPU_COMPUTE = {"AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "DSA_SQE"}


# -- the framework ops that launched kernels, read independently -----------------------------------

def _outermost(ranges: list[dict], pid, tid, at: Decimal) -> str | None:
    """The outermost namespaced range of (pid, tid) whose time holds ``at``."""
    holding = [(Decimal(str(e["ts"])), -Decimal(str(e["dur"])), e["name"]) for e in ranges
               if (e["pid"], e["tid"]) == (pid, tid)
               and Decimal(str(e["ts"])) <= at <= Decimal(str(e["ts"])) + Decimal(str(e["dur"]))]
    return min(holding)[2] if holding else None


def _kineto_launchers(path: Path) -> set[str]:
    """Each kernel's launch (the runtime call of its correlation id) and the outermost namespaced
    op of that thread holding it."""
    events = orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    ranges = [e for e in events if e.get("ph") == "X" and NAMESPACED.match(str(e.get("name")))]
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    found = set()
    for kernel in events:
        if kernel.get("cat") != "kernel" or kernel["name"].startswith(("ncclKernel", "ncclDevKernel")):
            continue
        launch = launches.get(kernel["args"].get("correlation"))
        if launch is not None:
            op = _outermost(ranges, launch["pid"], launch["tid"], Decimal(str(launch["ts"])))
            found |= {op} if op else set()
    return found


def _torch_npu_launchers(path: Path) -> set[str]:
    """Each compute task's ``async_npu`` arrow (its end held by the task) and the outermost
    namespaced op of the arrow's start thread holding its start."""
    events = orjson.loads(path.read_bytes())
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    ranges = [e for e in events if e.get("ph") == "X" and processes.get(e["pid"]) == "Python"
              and NAMESPACED.match(e["name"])]
    tasks = [e for e in events if e.get("ph") == "X" and processes.get(e["pid"]) == "Ascend Hardware"
             and e.get("args", {}).get("Task Type") in NPU_COMPUTE]
    starts = {e["id"]: e for e in events if e.get("ph") == "s" and e.get("cat") == "async_npu"}
    found = set()
    for end in (e for e in events if e.get("ph") == "f" and e.get("cat") == "async_npu"):
        at = Decimal(end["ts"])
        if end["id"] in starts and any((t["pid"], t["tid"]) == (end["pid"], end["tid"]) and
                                       Decimal(t["ts"]) <= at <= Decimal(t["ts"]) + Decimal(str(t["dur"]))
                                       for t in tasks):
            start = starts[end["id"]]
            op = _outermost(ranges, start["pid"], start["tid"], Decimal(start["ts"]))
            found |= {op} if op else set()
    return found


def _db_launchers(path: Path) -> Counter:
    """Per framework op, the compute tasks it launched in a torch_npu database: each task's
    ``connectionId`` listed in ``CONNECTION_IDS`` for a ``PYTORCH_API`` row (its ``connectionId`` an
    ``id`` there), and the outermost namespaced ``PYTORCH_API`` range of that row's thread holding
    its start."""
    db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    rows = db.execute("""
        SELECT t.globalTaskId, name.value, CAST(o.startNs AS INTEGER), CAST(o.endNs AS INTEGER)
        FROM TASK t JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId
        JOIN CONNECTION_IDS i ON i.connectionId = t.connectionId
        JOIN PYTORCH_API p ON p.connectionId = i.id
        JOIN PYTORCH_API o ON o.globalTid = p.globalTid
             AND CAST(p.startNs AS INTEGER) BETWEEN CAST(o.startNs AS INTEGER) AND CAST(o.endNs AS INTEGER)
        JOIN STRING_IDS name ON name.id = o.name""").fetchall()
    db.close()
    holding: dict[int, list] = defaultdict(list)
    for task, name, start, end in rows:
        if NAMESPACED.match(name):
            holding[task].append((start, start - end, name))
    return Counter(min(found)[2] for found in holding.values())


def test_the_database_form_links_its_kernels_to_the_ops_connection_ids_name():
    """``ascend-pt-db``: each kernel under the op ``CONNECTION_IDS`` links it to (docs/formats.md
    §5.10), as an SQL query of the two databases finds it; and so as its text form, the same job
    family's ``ascend-pt-2rank``, groups its kernels (the same ops, the same counts)."""
    sample = real_data("ascend-pt-db")
    expected = sum((_db_launchers(db) for db in sorted(sample.glob("rank*/*/ascend_pytorch_profiler_*.db"))),
                   Counter())
    rows = diff_report(Side(sample), Side(real_data("ascend-pt-2rank")), by="op")
    assert {r.name: r.base.count for r in rows if r.kind == FRAMEWORK_OP} == dict(expected)
    assert sum(expected.values()) == 374
    assert all(r.matched == "by framework op" and r.base.count == r.new.count for r in rows)


def test_torch_npu_against_kineto_matches_the_framework_ops_both_launched_kernels_from(capsys):
    """The issue's fourth "done means": a real torch_npu rank (AlexNet, Ascend 910B) against a real
    Kineto rank (a recommendation model, GPU) runs and says what matched and what did not; the rows
    matched by framework op are exactly the ops both traces launched kernels from."""
    npu = real_data("ascend-pt-2rank") / "rank0_ascend_pt"
    gpu = real_data("kineto-2rank") / "sampled_rank-0.json.gz"
    diag = Diagnostics()
    rows = diff_report(Side(npu), Side(gpu), by="op", diag=diag)
    matched = {r.name for r in rows if r.matched == "by framework op"}
    both = _torch_npu_launchers(npu / "ASCEND_PROFILER_OUTPUT" / "trace_view.json") & _kineto_launchers(gpu)
    assert matched == both
    assert {"aten::linear", "autograd::engine::evaluate_function: AddmmBackward0"} <= matched
    assert all(r.base.count and r.new.count for r in rows if r.name in matched)
    assert all(not (r.base.count and r.new.count) for r in rows if r.matched == "unmatched")
    [line] = [m for m in diag.messages() if m.startswith("--by op:")]
    found = diff.how_matched(rows)
    assert f"matched by framework op: {len(matched)} rows" in line
    assert f"unmatched: {found['unmatched'][1]} rows only in BASE" in line
    assert f"{found['unmatched'][3]} only in NEW" in line


def test_a_kineto_trace_against_itself_matches_every_row_with_delta_0():
    sample = real_data("kineto-2rank")
    rows = diff_report(Side(sample), Side(sample), by="op")
    assert rows and all(r.delta_total == 0 and r.delta_mean == 0 and not r.significant for r in rows)
    assert {r.matched for r in rows} == {"by framework op", "by name"}  # 2 kernels no op launched
    assert sum(r.base.total for r in rows if r.kind == FRAMEWORK_OP) > 0.99 * sum(r.base.total for r in rows)


@pytest.mark.parametrize(("sample", "linked"), [
    ("ascend-pt-2rank", 374), ("kineto-2rank", 2206), ("kineto-1.8-resnet50", 8772), ("ascend-pt-db", 374)])
def test_every_kernel_lands_in_one_row_and_which_samples_link_them(sample, linked):
    """Kernels (count and time) by op add up to the device rows by name (the same kernels:
    torch_npu's by name reads kernel_details.csv, whose times are rounded otherwise, within 10 ns a
    rank); how many a framework op launched is what docs/analysis.md says of each format."""
    path = real_data(sample)
    by_op = diff_report(Side(path), Side(path), by="op")
    by_name = [r for r in diff_report(Side(path), Side(path), by="name") if r.kind == "device"]
    assert sum(r.base.count for r in by_op) == sum(r.base.count for r in by_name)
    assert sum(r.base.total for r in by_op) == pytest.approx(sum(r.base.total for r in by_name), abs=20)
    assert sum(r.base.count for r in by_op if r.kind == FRAMEWORK_OP) == linked


def test_a_run_without_kernels_is_said_not_zeroed():
    sample = real_data("paddle-cpu-chrome")
    diag = Diagnostics()
    assert diff_report(Side(sample), Side(sample), by="op", diag=diag) == []
    assert any("records no device kernels" in m for m in diag.messages())


# -- the command end to end ------------------------------------------------------------------------

def test_the_command_end_to_end(capsys):
    npu = str(real_data("ascend-pt-2rank") / "rank0_ascend_pt")
    gpu = str(real_data("kineto-2rank") / "sampled_rank-0.json.gz")
    assert main(["diff", npu, gpu, "--by", "op", "--format", "json"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    jsonschema.validate(rows, SCHEMA)
    assert [r for r in rows if r["Matched"] == "by framework op" and r["Name"] == "aten::linear"]
    assert {r["Kind"] for r in rows} == {FRAMEWORK_OP, FAMILY}  # the GPU's optimizer kernels: no aten op
    assert "--by op: of BASE's device time" in captured.err
    assert main(["diff", npu, gpu, "--by", "op", "--format", "csv", "-q"]) == 0
    header = next(csv.reader(capsys.readouterr().out.splitlines()))
    assert header == list(diff.LAUNCHED_COLUMNS)
    assert main(["diff", gpu, gpu, "--by", "op", "--fail-above", "1", "-q"]) == 0
    assert main(["diff", "--help"]) == 0
    assert "--by op" in capsys.readouterr().out.replace("\n", " ")


# -- the algebra -----------------------------------------------------------------------------------

_LANES = ("thread 1", "thread 2")
_RANGE_NAMES = ("aten::linear", "aten::addmm", "autograd::engine::evaluate_function: MmBackward0",
                "ProfilerStep#1", "nn.Module: Linear_0")


@st.composite
def _steps(draw) -> list[StepRecords]:
    """Steps of one rank: on each host lane ranges nested as a thread's are (tops apart, children
    inside), launches starting arrows, kernels ending them (in this step or the next; some arrows
    end nowhere, some start nowhere)."""
    steps, flow = [], 0
    for index in range(draw(st.integers(1, 3))):
        base = index * 100_000
        slices: list[Slice] = []
        launches: list[int] = []
        for lane in _LANES:
            for top in range(draw(st.integers(0, 4))):
                start = base + top * 10_000
                slices.append(Slice(0, Layer.HOST, lane, draw(st.sampled_from(_RANGE_NAMES)), start,
                                    draw(st.integers(0, 9_000))))
                for child in range(draw(st.integers(0, 2))):
                    slices.append(Slice(0, Layer.HOST, lane, draw(st.sampled_from(_RANGE_NAMES)),
                                        start + child * 3_000, draw(st.integers(0, 3_000))))
            for _ in range(draw(st.integers(0, 5))):
                flow += 1
                launches.append(flow)
                start = base + draw(st.integers(0, 50_000))
                slices.append(Slice(0, Layer.HOST, lane, "cudaLaunchKernel", start, 5, flows_out=(flow,)))
        earlier = steps[-1].slices if steps else []
        ends = launches + [f for s in earlier for f in s.flows_out] + [-1]
        for _ in range(draw(st.integers(0, 8))):
            slices.append(Slice(0, Layer.STREAM, "Stream 7", draw(st.sampled_from(("gemm", "relu_kernel"))),
                                base + 60_000, draw(st.integers(0, 10**6)), task_type=GPU_KERNEL,
                                flows_in=tuple(draw(st.lists(st.sampled_from(ends), max_size=2)))))
        steps.append(StepRecords(0, None, index, None, slices))
    return steps


def _reference(steps: list[StepRecords]) -> list[tuple[str, str, int]]:
    """Each kernel's row, found the slow way: the outermost namespaced range of its launch's lane
    holding the launch's start, the launch in its step or the one before."""
    out = []
    for index, batch in enumerate(steps):
        near = [s for b in steps[max(0, index - 1):index + 1] for s in b.slices if s.layer is Layer.HOST]
        for kernel in (s for s in batch.slices if s.layer is Layer.STREAM):
            op = None
            for f in kernel.flows_in:
                launch = next((s for s in near if f in s.flows_out), None)
                holding = [] if launch is None else sorted(
                    (r.start_ns, -r.dur_ns, r.name) for r in near if r.lane == launch.lane
                    and NAMESPACED.match(r.name) and r.start_ns <= launch.start_ns <= r.end_ns)
                if holding:
                    op = holding[0][2]
                    break
            out.append((kernel.name, KERNEL, kernel.dur_ns) if op is None
                       else (op, FRAMEWORK_OP, kernel.dur_ns))
    return out


@settings(max_examples=300, deadline=None)
@given(_steps())
def test_each_kernel_lands_in_exactly_one_row_under_the_outermost_framework_op(steps):
    launchers = Launchers()
    samples = [diff.launched_sample(0, batch, launchers) for batch in steps]
    expected: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for name, kind, dur in _reference(steps):
        expected[name, kind][0] += 1
        expected[name, kind][1] += dur
    found: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for sample in samples:
        for key, (count, total) in sample.ops.items():
            found[key][0] += count
            found[key][1] += total
    assert found == expected
    kernels = [s for b in steps for s in b.slices if s.layer is Layer.STREAM]
    assert sum(total for _, total in found.values()) == sum(s.dur_ns for s in kernels)


_KEYS = st.tuples(st.sampled_from(["aten::mm", "aten::conv2d", "gemm_nt", "relu_fw", "Conv2D"]),
                  st.sampled_from([FRAMEWORK_OP, KERNEL]))
_SAMPLES = st.lists(st.builds(lambda step, ops: StepSample(0, step, (), ops), st.integers(0, 9),
                              st.dictionaries(_KEYS, st.tuples(st.integers(1, 5), st.integers(0, 10**9)),
                                              max_size=5)), max_size=5)


@settings(max_examples=300, deadline=None)
@given(_SAMPLES, _SAMPLES, st.dictionaries(st.sampled_from(["gemm_nt", "relu_fw", "Conv2D", "aten::mm"]),
                                           st.sampled_from(["matmul", "conv", "elementwise"])))
def test_rows_keep_each_sides_time_and_count_whatever_is_matched_how(base, new, families):
    """Sum over rows = the side's total device time and kernel count, per side; a family renames
    only kernels no framework op launched; Matched says both sides hold the row, or unmatched."""
    rows = compare(base, new, "op", families)
    for side, samples in (("base", base), ("new", new)):
        assert sum(getattr(r, side).total for r in rows) == sum(t for s in samples for _, t in s.ops.values())
        assert sum(getattr(r, side).count for r in rows) == sum(c for s in samples for c, _ in s.ops.values())
    for row in rows:
        assert (row.kind == FAMILY) == (row.name in families.values())
        assert (row.matched == "unmatched") == (not (row.base.count and row.new.count))
    figures = diff.how_matched(rows)
    assert sum(f[2] for f in figures.values()) == sum(r.base.total for r in rows)
    assert sum(f[0] for f in figures.values()) == len(rows)
