"""``trace2perfetto ops``: operator statistics against the profilers' own (op_statistic.csv, Paddle's
operator summary), independent sums of the inputs' own records, and the algebra of the partial sums."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json
import random
import re
import shutil
import sqlite3
import statistics
from collections import defaultdict
from pathlib import Path

import jsonschema
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.analyses.ops import BY, OpRow, RankOps, accumulate, across, combine, merge, ops_report
from converters.cli import main
from converters.errors import Diagnostics
from converters.model import GPU_KERNEL, HOST_OPERATOR, Layer, Slice, Step, StepKey, StepRecords
from fixtures.ascend_pt_gen import write_ascend_pt_profile
from tests.conftest import real_data

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "ops.schema.json").read_text())
_STAT = "ASCEND_PROFILER_OUTPUT/op_statistic.csv"
_FIGURES = ("Total Time(us)", "Min Time(us)", "Avg Time(us)", "Max Time(us)")


def _by_rank(rows: list[OpRow]) -> dict[int, list[OpRow]]:
    out: dict[int, list[OpRow]] = defaultdict(list)
    for row in rows:
        out[row.rank].append(row)
    return out


def _us(row: OpRow) -> tuple[float, ...]:
    return tuple(ns / 1000 for ns in (row.total_ns, row.min_ns, row.avg_ns, row.max_ns))


# -- against the profiler's own op_statistic.csv ----------------------------------------------------

def test_text_form_equals_op_statistic_csv_of_every_rank(tmp_path):
    sample = shutil.copytree(real_data("ascend-pt-2rank"), tmp_path / "job")
    expected = {}
    for rank_dir in sorted(sample.glob("rank*_ascend_pt")):
        rank = int(rank_dir.name[4])
        with open(rank_dir / _STAT, newline="") as f:
            expected[rank] = list(csv.DictReader(f))
        (rank_dir / _STAT).unlink()  # computed from the tasks, never copied from the analysis
    got = _by_rank(ops_report(sample))
    assert sorted(got) == sorted(expected) == [0, 1]
    for rank, reference in expected.items():
        rows = got[rank]
        # every op type and core type, communication (the HCCL rows of kernel_details) left out,
        # in the file's order: by total time, largest first
        assert [(r.name, r.core_type) for r in rows] == [(e["OP Type"], e["Core Type"]) for e in reference]
        for row, e in zip(rows, reference, strict=True):
            assert row.count == int(e["Count"]), row
            for mine, field in zip(_us(row), _FIGURES, strict=True):
                assert mine == pytest.approx(float(e[field]), abs=0.01), (row, field)
            assert row.ratio == pytest.approx(float(e["Ratio(%)"]), abs=0.01), row


def test_across_ranks_equals_the_spread_of_each_ranks_op_statistic_csv(tmp_path):
    """Per op type and core type: the ranks' totals as each rank's op_statistic.csv gives them, their
    min, median and max, the slowest and fastest rank, computed here from the files; ours from the
    tasks, with those files removed."""
    sample = shutil.copytree(real_data("ascend-pt-2rank"), tmp_path / "job")
    totals: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for rank_dir in sorted(sample.glob("rank*_ascend_pt")):
        with open(rank_dir / _STAT, newline="") as f:
            for e in csv.DictReader(f):
                totals[e["OP Type"], e["Core Type"]][int(rank_dir.name[4])] = float(e["Total Time(us)"])
        (rank_dir / _STAT).unlink()
    rows = across(ops_report(sample))
    assert {(r.name, r.core_type) for r in rows} == set(totals)
    gaps = [r.gap_ns for r in rows]
    assert gaps == sorted(gaps, reverse=True)
    assert any(r.ranks == 2 for r in rows)
    for row in rows:
        theirs = totals[row.name, row.core_type]
        values = sorted(theirs.values())
        assert row.ranks == len(theirs)
        assert (row.min_ns / 1000, row.median_ns / 1000, row.max_ns / 1000) == \
            pytest.approx((values[0], statistics.median(values), values[-1]), abs=0.01), row
        if values[0] + 0.02 < values[-1]:  # the rounding of the files cannot swap them
            assert row.slowest_rank == max(theirs, key=theirs.get), row
            assert row.fastest_rank == min(theirs, key=theirs.get), row
        assert row.max_over_median == pytest.approx(values[-1] / statistics.median(values), rel=1e-4)


def _db_tasks(db_path: Path) -> dict[tuple[str, str], list[int]]:
    """Compute tasks per (op type, task type), from the database's own tables, in SQL (read only: never
    the sample's -shm)."""
    with sqlite3.connect(f"file:{db_path}?mode=ro&immutable=1", uri=True) as db:
        query = """SELECT o.value, t2.value, t.endNs - t.startNs FROM COMPUTE_TASK_INFO c
                   JOIN TASK t ON t.globalTaskId = c.globalTaskId
                   JOIN STRING_IDS o ON o.id = c.opType JOIN STRING_IDS t2 ON t2.id = c.taskType"""
        out: dict[tuple[str, str], list[int]] = defaultdict(list)
        for op_type, task_type, dur in db.execute(query):
            out[op_type, task_type].append(dur)
    return out


def test_database_form_equals_its_own_tasks_and_the_text_form_of_its_job_family(tmp_path):
    """ascend-pt-db is another run of the job ascend-pt-2rank holds (28 minutes later, the same model
    and step): the same op types, core types and counts; the times are its own, so they are checked
    against its tables summed in SQL (analysis.db holds no op statistic)."""
    sample = shutil.copytree(real_data("ascend-pt-db"), tmp_path / "db")  # its WAL is read from a copy
    text = real_data("ascend-pt-2rank")
    got = _by_rank(ops_report(sample))
    assert sorted(got) == [0, 1]
    for rank, rows in got.items():
        with open(text / f"rank{rank}_ascend_pt" / _STAT, newline="") as f:
            family = {(e["OP Type"], e["Core Type"]): int(e["Count"]) for e in csv.DictReader(f)}
        assert {(r.name, r.core_type): r.count for r in rows} == family
        tasks = _db_tasks(next(sample.glob(f"rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/*_{rank}.db")))
        total = sum(sum(d) for d in tasks.values())
        for row in rows:
            durations = tasks[row.name, row.core_type]
            assert (row.count, row.total_ns, row.min_ns, row.max_ns) == \
                (len(durations), sum(durations), min(durations), max(durations))
            assert row.ratio == pytest.approx(sum(durations) / total * 100, abs=1e-9)


# -- GPU kernels: the trace's own kernel events -------------------------------------------------------

def _kernel_sums(path: Path) -> dict[str, list[float]]:
    """Kernel durations by name, straight from the trace (orjson): compute kernels, NCCL's apart."""
    document = orjson.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
    events = document["traceEvents"] if isinstance(document, dict) else document
    out: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel") and \
                not e["name"].startswith(("ncclKernel", "ncclDevKernel")):
            out[e["name"]].append(float(e["dur"]))
    return out


@pytest.mark.parametrize("sample", ["kineto-2rank", "kineto-1.8-resnet50"])
def test_kineto_kernels_by_name_equal_the_traces_kernel_events(sample):
    folder = real_data(sample)
    files = sorted(folder.glob("*.json*"))
    got = _by_rank(ops_report(folder, by="name"))
    assert len(got) == len(files)
    for rank, path in zip(sorted(got), files, strict=True):
        expected = _kernel_sums(path)
        rows = got[rank]
        assert {r.name for r in rows} == set(expected)
        assert {r.core_type for r in rows} == {"GPU"}
        for row in rows:
            durations = expected[row.name]
            assert row.count == len(durations), row.name
            assert row.total_ns / 1000 == pytest.approx(sum(durations), abs=0.01), row.name
            assert (row.min_ns / 1000, row.max_ns / 1000) == pytest.approx((min(durations), max(durations)),
                                                                           abs=0.001)


# -- Paddle: its operator summary -------------------------------------------------------------------

_SUMMARY_ROW = re.compile(r"^(\S.*?)\s{2,}(\d+)\s+([\d.]+) / ([\d.]+) / ([\d.]+) / ([\d.]+) / ([\d.]+)\s")


def _operator_summary(path: Path) -> dict[str, tuple[int, float, float, float, float, float]]:
    """The top-level rows of summary.txt's Operator Summary (ms, 2 decimals): name -> calls, CPU
    total, avg, max, min, ratio."""
    text = path.read_text()
    table = text[text.index("Operator Summary"):]
    table = table[table.index("All threads merged"):]
    rows = {}
    for line in table.splitlines()[1:]:
        if line.startswith("---"):
            break
        found = _SUMMARY_ROW.match(line)
        if found:  # indented rows are an operator's parts
            rows[found[1]] = (int(found[2]), *map(float, found.group(3, 4, 5, 6, 7)))
    return rows


@pytest.mark.parametrize("sample", ["paddle-cpu-chrome", "paddle-cpu-protobuf"])
def test_paddle_host_operators_equal_its_operator_summary(sample):
    folder = real_data(sample)
    expected = _operator_summary(folder / "summary.txt")
    rows = ops_report(folder, by="name")
    assert {r.name: r.count for r in rows} == {name: e[0] for name, e in expected.items()}
    for row in rows:
        calls, total, avg, high, low, ratio = expected[row.name]
        assert row.core_type == "CPU"
        ms = (row.total_ns / 1e6, row.avg_ns / 1e6, row.max_ns / 1e6, row.min_ns / 1e6)
        assert ms == pytest.approx((total, avg, high, low), abs=0.005 + 1e-9), row.name  # its rounding
        assert row.ratio == pytest.approx(ratio, abs=0.005 + 1e-9), row.name


def test_mindspore1x_types_are_framework_raws_and_ai_cpu_kernels():
    folder = real_data("mindspore-1x") / "single-device"
    with open(folder / "framework_raw_1.csv", newline="") as f:
        types = {row["op_type"] for row in csv.DictReader(f)}
    rows = ops_report(folder)
    assert {r.core_type for r in rows} == {"AI_CORE", "AI_CPU"}
    assert {r.name for r in rows if r.core_type == "AI_CORE"} <= types
    assert sum(r.ratio for r in rows) == pytest.approx(100)


def test_a_cpu_only_run_counts_its_cpu_ops_and_warns_of_nothing(capsys):
    """A MindSpore CPU run has no device tasks: its CPU ops (FRAMEWORK/cpu_op_execute_timestamp) are
    its rows, as host operators (tests/test_real_mindspore_cpu.py checks them against the files),
    and the summary read's own warning (host events "drawn with --kind detail only") is not shown."""
    assert main(["ops", str(real_data("mindspore-cpu") / "pynative-profile"), "--format", "csv"]) == 0
    out = capsys.readouterr()
    assert not [line for line in out.err.splitlines() if "warning" in line]
    assert {line.split(",")[2] for line in out.out.splitlines()[1:]} == {"CPU"}


def test_no_device_tasks_nor_host_operators_gives_no_rows_and_says_so():
    diag = Diagnostics()  # a step trace only (a CPU run's CPU ops are its host operators)
    assert ops_report(real_data("mindspore-1x") / "hccl-rank6", diag=diag) == []
    assert any("no device tasks" in m for m in diag.messages())


# -- the command, on a generated profile --------------------------------------------------------------

@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ops")
    write_ascend_pt_profile(root, ranks=2, steps=3, tasks_per_step=30, seed=5)
    return root


def _kernel_details(profile: Path) -> dict[tuple[int, str, str], list[float]]:
    """Compute kernels per (rank, type, core), from the generated kernel_details.csv."""
    out: dict[tuple[int, str, str], list[float]] = defaultdict(list)
    for path in sorted(profile.glob("*/ASCEND_PROFILER_OUTPUT/kernel_details.csv")):
        rank = json.loads(next(path.parent.parent.glob("profiler_info*.json")).read_text())["rank_id"]
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row["Accelerator Core"] not in ("HCCL", "COMMUNICATION"):
                    out[rank, row["Type"], row["Accelerator Core"]].append(float(row["Duration(us)"]))
    return out


def test_csv_equals_the_kernel_details_it_is_computed_from(profile, capsys):
    assert main(["ops", str(profile), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(rows[0]) == ["Rank", "OP Type", "Core Type", "Count", *_FIGURES, "Ratio(%)"]
    expected = _kernel_details(profile)
    assert {(int(r["Rank"]), r["OP Type"], r["Core Type"]) for r in rows} == set(expected)
    for r in rows:
        durations = expected[int(r["Rank"]), r["OP Type"], r["Core Type"]]
        assert int(r["Count"]) == len(durations)
        assert float(r["Total Time(us)"]) == pytest.approx(sum(durations), abs=0.001)
    for rank in (0, 1):
        mine = [float(r["Total Time(us)"]) for r in rows if r["Rank"] == str(rank)]
        assert mine == sorted(mine, reverse=True)
        ratios = [float(r["Ratio(%)"]) for r in rows if r["Rank"] == str(rank)]
        assert sum(ratios) == pytest.approx(100, abs=0.05)


@pytest.mark.parametrize("by", BY)
def test_json_is_valid_against_its_schema(profile, capsys, by):
    assert main(["ops", str(profile), "--by", by, "--format", "json", "--ranks", "1"]) == 0
    rows = json.loads(capsys.readouterr().out)
    jsonschema.validate(rows, SCHEMA)
    assert rows and {r["Rank"] for r in rows} == {1}
    if by == "step":
        assert [r["Step"] for r in rows] == sorted(r["Step"] for r in rows)
        for step in {r["Step"] for r in rows}:
            assert sum(r["Ratio(%)"] for r in rows if r["Step"] == step) == pytest.approx(100, abs=0.05)


@pytest.mark.parametrize("by", BY)
def test_across_json_is_valid_against_its_schema_and_csv_agrees(profile, capsys, by):
    assert main(["ops", str(profile), "--by", by, "--across", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    jsonschema.validate(rows, SCHEMA)
    assert rows and all(r["Ranks"] in (1, 2) and "Rank" not in r for r in rows)
    gaps = [round(r["Max Total Time(us)"] - r["Median Total Time(us)"], 3) for r in rows]
    assert gaps == sorted(gaps, reverse=True)
    assert main(["ops", str(profile), "--by", by, "--across", "--format", "csv"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [float(r["Max Total Time(us)"]) for r in table] == [r["Max Total Time(us)"] for r in rows]
    assert main(["ops", str(profile), "--by", by, "--across"]) == 0
    out = capsys.readouterr().out
    assert "Slowest Rank" in out.splitlines()[0] and "max minus median" in out


def test_table_empty_input_and_errors(profile, tmp_path, capsys):
    assert main(["ops", str(profile), "--by", "name"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["Rank", "Name", "Core"] and "share of the rank's" in out
    assert main(["ops", str(profile), "--by", "kind"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert main(["ops", str(profile), "--ranks", "9"]) == 2
    assert "unknown rank 9" in capsys.readouterr().err
    assert main(["ops", "--help"]) == 0


# -- the algebra: partial sums in any split and order ---------------------------------------------------

_TASKS = ("AI_CORE", "AI_VECTOR_CORE", GPU_KERNEL, "HCCL", "NOTIFY_WAIT", "MEMCPY")  # the last 3: no compute


def _records(draw_steps: list[list[tuple[str, str, int, str]]], rank: int) -> list[StepRecords]:
    steps = []
    for i, tasks in enumerate(draw_steps):
        slices = [Slice(rank, Layer.STREAM, "Stream 1", name, 1000 * i, dur,
                        {"Type": name.upper(), "Input Shapes": shapes}, task)
                  for name, task, dur, shapes in tasks]
        slices.append(Slice(rank, Layer.HOST, "thread", "matmul dygraph", 0, 5, None, HOST_OPERATOR))
        steps.append(StepRecords(rank, None, i + 1, Step(None, i + 1, 0, 1), slices, key=StepKey(0, i + 1)))
    return steps


_task = st.tuples(st.sampled_from(("mul", "add", "conv")), st.sampled_from(_TASKS),
                  st.integers(0, 10**6), st.sampled_from(("1,2", "3")))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_task, max_size=8), min_size=1, max_size=6), st.sampled_from(BY),
       st.randoms(use_true_random=False), st.integers(0, 1))
def test_partial_sums_combine_to_the_same_rows_in_any_split_and_order(steps, by, rnd: random.Random, rank):
    records = _records(steps, rank)
    whole = combine([accumulate(rank, records, by)])
    cuts = sorted(rnd.sample(range(len(records) + 1), rnd.randint(0, len(records) + 1)))
    bounds = zip([0, *cuts], [*cuts, len(records)], strict=True)
    parts = [accumulate(rank, records[a:b], by) for a, b in bounds]
    rnd.shuffle(parts)
    other = accumulate(1 - rank, _records(steps[:1], 1 - rank), by)  # another rank among them
    assert [r for r in combine([*parts, other]) if r.rank == rank] == whole
    folded = parts[0]
    for part in parts[1:]:
        folded = merge(folded, part)
    assert combine([folded]) == whole
    assert all(r.core_type not in ("HCCL", "NOTIFY_WAIT", "MEMCPY", GPU_KERNEL) for r in whole)


_rank_rows = st.dictionaries(  # rank -> its total per op type (a rank may lack a type)
    st.integers(0, 63), st.dictionaries(st.sampled_from(("mul", "add", "conv")), st.integers(0, 10**9),
                                        min_size=1), min_size=1, max_size=8)


def _rows_of(ranks: dict[int, dict[str, int]]) -> list[OpRow]:
    return [OpRow(rank, name, "AI_CORE", 1, total, total, total, 0.0) for rank, types in ranks.items()
            for name, total in types.items()]


@settings(max_examples=100, deadline=None)
@given(_rank_rows, st.randoms(use_true_random=False))
def test_across_does_not_depend_on_the_ranks_order_and_bounds_the_spread(ranks, rnd: random.Random):
    rows = _rows_of(ranks)
    spread = across(rows)
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    assert across(shuffled) == spread
    # the ranks renamed by a permutation: the same figures, the slowest and fastest renamed with them
    # where their totals are not tied (ties go to the lower rank, which a renaming moves)
    names = sorted(ranks)
    renamed = dict(zip(names, rnd.sample(names, len(names)), strict=True))
    moved = across(dataclasses.replace(r, rank=renamed[r.rank]) for r in rows)
    assert [(r.name, r.ranks, r.min_ns, r.median_ns, r.max_ns) for r in moved] == \
        [(r.name, r.ranks, r.min_ns, r.median_ns, r.max_ns) for r in spread]
    for mine, theirs in zip(spread, moved, strict=True):
        totals = [ranks[rank][mine.name] for rank in ranks if mine.name in ranks[rank]]
        assert mine.ranks == len(totals) and mine.min_ns <= mine.median_ns <= mine.max_ns
        assert ranks[mine.slowest_rank][mine.name] == mine.max_ns == max(totals)
        assert ranks[mine.fastest_rank][mine.name] == mine.min_ns == min(totals)
        if totals.count(mine.max_ns) == 1:
            assert theirs.slowest_rank == renamed[mine.slowest_rank]
    assert [r.gap_ns for r in spread] == sorted((r.gap_ns for r in spread), reverse=True)


@given(st.integers(0, 63), st.dictionaries(st.sampled_from(("mul", "add")), st.integers(0, 10**9),
                                           min_size=1))
def test_across_one_rank_is_its_own_min_median_and_max(rank, types):
    for row in across(_rows_of({rank: types})):
        assert row.ranks == 1 and row.min_ns == row.median_ns == row.max_ns == types[row.name]
        assert row.slowest_rank == row.fastest_rank == rank
        assert row.max_over_median == (1.0 if row.max_ns else None)  # no ratio of 0 over 0


def test_host_operators_count_only_where_a_rank_ran_no_device_work():
    device = _records([[("mul", "AI_CORE", 7, "1")]], 0)
    host_only = _records([[("mul", "HCCL", 7, "1")]], 1)
    rows = combine([accumulate(0, device), accumulate(1, host_only)])
    assert [(r.rank, r.name, r.core_type, r.count) for r in rows] == \
        [(0, "MUL", "AI_CORE", 1), (1, "matmul dygraph", "CPU", 1)]
    assert RankOps(2, "type").empty


def test_msprof_types_are_mindspores_scope_names_without_their_op_number():
    rows = ops_report(real_data("msprof-2rank"), ranks=[0])
    names = {r.name for r in rows}
    assert {"Cast", "Conv2D", "TransData"} <= names
    assert not [n for n in names if "/" in n or re.search(r"-op\d+$", n)]
    assert {r.core_type for r in rows} == {"AI_CORE", "AI_CPU"}
