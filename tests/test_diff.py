"""``trace2perfetto diff BASE NEW``: against HTA's TraceDiff on two real Kineto ranks, a profile
against itself, a real torch_npu rank against a copy with one op type made 1.5x slower, torch_npu
against Kineto, the command end to end, and the algebra of deltas and significance."""

from __future__ import annotations

import csv
import json
import logging
import re
import shutil
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.analyses import diff
from converters.analyses.comm import comm_report
from converters.analyses.diff import PHASES, Side, StepSample, compare, diff_report
from converters.cli import main
from converters.errors import Diagnostics
from tests.conftest import real_data

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "diff.schema.json").read_text())
OUTPUT = "ASCEND_PROFILER_OUTPUT"


def _json(capsys, argv: list[str]) -> tuple[int, list[dict]]:
    code = main([*argv, "--format", "json", "-q"])
    rows = json.loads(capsys.readouterr().out)
    jsonschema.validate(rows, SCHEMA)
    return code, rows


# -- (a) against HTA's TraceDiff -------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")  # HTA's use of pandas
def test_by_name_equals_hta_trace_diff_on_two_real_kineto_ranks(tmp_path, capsys):
    """HTA 0.5's ``TraceDiff.compare_traces`` (run here) of rank 0 (control) against rank 1 (test)
    over all iterations, GPU side: our device rows hold every kernel it counts, counts exact, times
    within 0.1%. HTA's GPU side also counts memcpy, memset and the NCCL kernels, which our op
    statistics leave out (transfers and communication, not computing: ``intervals.is_compute``)."""
    trace_diff = pytest.importorskip("hta.trace_diff", reason="HolisticTraceAnalysis is a test extra")
    logging.getLogger("hta").setLevel(logging.WARNING)
    sample = real_data("kineto-2rank")
    labelled = []
    for rank in (0, 1):
        folder = tmp_path / f"rank{rank}"
        folder.mkdir()
        shutil.copy(sample / f"sampled_rank-{rank}.json.gz", folder)
        labelled.append(trace_diff.LabeledTrace(("control", "test")[rank], trace_dir=str(folder)))
    control, test = labelled
    theirs = trace_diff.TraceDiff.compare_traces(
        control, test, control_rank=control.ranks(), test_rank=test.ranks(),
        control_iteration=control.iterations(), test_iteration=test.iterations(),
        device_type=trace_diff.DeviceType.GPU)
    theirs = theirs[~theirs.index.str.match(r"Memcpy |Memset |ncclKernel")]

    code, rows = _json(capsys, ["diff", str(sample), str(sample), "--by", "name", "--base-ranks", "0",
                                "--new-ranks", "1"])
    assert code == 0
    ours = {row["Name"]: row for row in rows if row["Kind"] == "device"}
    assert set(ours) == set(theirs.index)
    for name, row in theirs.iterrows():
        mine = ours[name]
        assert (mine["Base Count"], mine["New Count"]) == (row.control_counts, row.test_counts), name
        for side, time in (("Base", row.control_total_duration), ("New", row.test_total_duration)):
            assert mine[f"{side} Time(us)"] == pytest.approx(time, rel=1e-3, abs=1e-3), (name, side)


# -- (b) a profile against itself ------------------------------------------------------------------

@pytest.mark.parametrize("sample", ["ascend-pt-2rank", "kineto-2rank"])
@pytest.mark.parametrize("by", diff.BY)
def test_a_profile_against_itself_changes_nothing(capsys, sample, by):
    path = str(real_data(sample))
    code, rows = _json(capsys, ["diff", path, path, "--by", by, "--fail-above", "1"])
    assert code == 0
    assert rows
    assert all(row["Delta Time(us)"] in (0, None) and not row["Significant"] for row in rows)
    assert all(row["Delta(%)"] in (0, None) for row in rows)


# -- (c) one op type made 1.5x slower --------------------------------------------------------------

def _slower(source: Path, target: Path, op_type: str, factor: Decimal) -> int:
    """A copy of a torch_npu rank with every kernel of ``op_type`` ``factor`` times longer, in
    kernel_details.csv and trace_view.json alike; returns how many kernels changed."""
    shutil.copytree(source, target)
    kernels = target / OUTPUT / "kernel_details.csv"
    with open(kernels, newline="") as f:
        table = list(csv.reader(f))
    header = table[0]
    kind, duration, name = (header.index(c) for c in ("Type", "Duration(us)", "Name"))
    names = set()
    for row in table[1:]:
        if row[kind] == op_type:
            row[duration] = str(Decimal(row[duration]) * factor)
            names.add(row[name])
    kernels.chmod(0o644)
    with open(kernels, "w", newline="") as f:
        csv.writer(f).writerows(table)
    trace = target / OUTPUT / "trace_view.json"
    events = json.loads(trace.read_text())
    for event in events:
        if event.get("ph") == "X" and event.get("name") in names:
            event["dur"] = float(Decimal(str(event["dur"])) * factor)
    trace.chmod(0o644)
    trace.write_text(json.dumps(events))
    return sum(row[kind] == op_type for row in table[1:])


def test_one_op_type_made_slower_is_the_first_row_with_plus_50_percent(tmp_path, capsys):
    base = real_data("ascend-pt-2rank") / "rank0_ascend_pt"
    new = tmp_path / "rank0_ascend_pt"
    changed = _slower(base, new, "MatMulV2", Decimal("1.5"))
    assert changed == 8
    code, rows = _json(capsys, ["diff", str(base), str(new), "--by", "type"])
    assert code == 0
    first = rows[0]
    assert (first["Name"], first["Kind"]) == ("MatMulV2", "device")
    assert (first["Base Count"], first["New Count"]) == (8, 8)
    assert first["Delta(%)"] == 50.0
    assert first["Delta Time(us)"] == pytest.approx(first["Base Time(us)"] / 2, abs=0.001 * changed)
    assert first["Significant"]
    assert all(row["Delta Time(us)"] == 0 and not row["Significant"] for row in rows[1:])
    assert main(["diff", str(base), str(new), "--by", "type", "--fail-above", "1", "-q"]) == 3
    assert main(["diff", str(base), str(new), "--by", "type", "--fail-above", "60", "-q"]) == 0
    assert main(["diff", str(new), str(base), "--by", "type", "--fail-above", "1", "-q"]) == 0  # faster


# -- (d) torch_npu against Kineto ------------------------------------------------------------------

def test_torch_npu_against_kineto_says_what_matched(capsys):
    npu = real_data("ascend-pt-2rank") / "rank0_ascend_pt"
    gpu = real_data("kineto-2rank") / "sampled_rank-0.json.gz"
    diag = Diagnostics()
    rows = diff_report(Side(npu), Side(gpu), by="type", diag=diag)
    by_name = {row.name: row for row in rows}
    assert by_name["matmul"].base.count == 9 and by_name["matmul"].new.count > 0  # MatMulV2 and BatchMatMul
    assert by_name["conv"].base.count > 0
    unmatched = [r for r in rows if not (r.base.count and r.new.count)]
    assert unmatched and any(r.base.count for r in unmatched) and any(r.new.count for r in unmatched)
    [warning] = [w for w in diag.messages() if "op_families.json" in w]
    matched = sum(1 for r in rows if r.base.count and r.new.count)
    assert f"{matched} rows on both sides" in warning
    assert main(["diff", str(npu), str(gpu), "--by", "type"]) == 0
    captured = capsys.readouterr()
    assert "matmul" in captured.out and "only in BASE" in captured.err
    code, _ = _json(capsys, ["diff", str(npu), str(gpu)])  # step phases need no matching
    assert code == 0


# -- (e) the command end to end --------------------------------------------------------------------

def test_the_command_end_to_end(tmp_path, capsys):
    sample = str(real_data("kineto-2rank"))
    assert main(["diff", sample, sample, "--base-ranks", "0", "--new-ranks", "1", "--base-steps", "551",
                 "--new-steps", "552", "--format", "csv", "-q"]) == 0
    rows = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert [row["Name"] for row in rows] and {row["Name"] for row in rows} == set(PHASES)
    assert all((row["Base Steps"], row["New Steps"]) == ("1", "1") for row in rows)
    assert main(["diff", sample, sample]) == 0
    out = capsys.readouterr().out
    assert "Step Time" in out and "Noise" in out
    assert main(["diff", sample]) == 2  # NEW missing
    assert main(["diff", sample, sample, "--ranks", "0"]) == 2  # one selection per side
    assert main(["diff", sample, sample, "--base-steps", "9999", "-q"]) == 2
    assert "--base-ranks" in _help(capsys) and "exit codes:" in _help(capsys) and "3 diff" in _help(capsys)


def _help(capsys) -> str:
    assert main(["diff", "--help"]) == 0
    return capsys.readouterr().out


def test_families_are_data_and_match_both_vendors():
    assert diff.family_of("aclnnAddmm_MatMulCommon_MatMulV2") == "matmul"
    assert diff.family_of("ampere_sgemm_128x64_nn") == "matmul"
    assert diff.family_of("Conv2DBackpropFilter") == "conv"
    assert diff.family_of("SoftmaxV2") == diff.family_of("cunn_SoftMaxForward") == "softmax"
    assert diff.family_of("hcom_allReduce__123") == diff.family_of("ncclKernel_AllReduce_RING") == "allreduce"
    assert diff.family_of("LayerNormV3") == diff.family_of("vectorized_layer_norm_kernel") == "layernorm"
    assert diff.family_of("no such op") is None


# -- the algebra -----------------------------------------------------------------------------------

_NAMES = st.sampled_from(["MatMul", "Add", "Conv2D", "Cast"])
_OPS = st.dictionaries(st.tuples(_NAMES, st.sampled_from(["device", "host"])),
                       st.tuples(st.integers(1, 5), st.integers(0, 10**9)), max_size=4)
_PHASE = st.one_of(st.none(), st.integers(0, 10**10))
_STEP = st.builds(lambda rank, step, phases, ops: StepSample(rank, step, tuple(phases), ops),
                  st.integers(0, 3), st.one_of(st.none(), st.integers(0, 100)),  # None: a pseudo step
                  st.lists(_PHASE, min_size=5, max_size=5), _OPS)
_SIDE = st.lists(_STEP, max_size=6)


@settings(max_examples=200, deadline=None)
@given(_SIDE, _SIDE, st.sampled_from(diff.BY))
def test_swapping_base_and_new_negates_every_delta_and_the_base_sets_the_noise(base, new, by):
    forward = {(r.name, r.kind): r for r in compare(base, new, by)}
    backward = {(r.name, r.kind): r for r in compare(new, base, by)}
    assert set(forward) == set(backward)
    for key, row in forward.items():
        other = backward[key]
        assert (row.delta_mean is None) == (other.delta_mean is None)
        if row.delta_mean is not None:
            assert row.delta_mean == pytest.approx(-other.delta_mean, abs=1e-6)
        if by != "step":
            assert row.delta_total == -other.delta_total
        reference = row.base if row.base.mean is not None and row.base.count != 0 else row.new
        assert row.noise == (None if reference.mean is None or not row.comparable else max(
            diff.K * diff.MAD_TO_SIGMA * reference.mad, diff.FLOOR * abs(reference.mean)))


@settings(max_examples=200, deadline=None)
@given(_SIDE, st.sampled_from(diff.BY))
def test_identical_sides_give_zero_and_nothing_significant(side, by):
    rows = compare(side, list(side), by)
    for row in rows:
        assert row.delta_mean in (0, None)
        assert not row.significant
        assert by == "step" or row.delta_total == 0
    assert not diff.regressions(rows, by, 0.0)


@given(st.lists(st.integers(0, 10**9), min_size=1, max_size=8), st.integers(1, 10**9))
def test_a_constant_shift_beyond_the_noise_is_significant(samples, shift):
    base = [StepSample(0, i, (x, None, None, None, None), {}) for i, x in enumerate(samples)]
    new = [StepSample(0, i, (x + shift, None, None, None, None), {}) for i, x in enumerate(samples)]
    [row] = [r for r in compare(base, new, "step") if r.name == PHASES[0]]
    assert row.delta_mean == pytest.approx(shift)
    assert row.significant == (shift > row.noise)
    assert row.noise >= diff.FLOOR * row.base.mean


def test_a_cpu_run_is_compared_by_its_host_operators(capsys):
    """A CPU run records no device tasks: by type its host operators are the rows (MindSpore's CPU
    ops), never rows of zeros, and no warning of device tasks without op types (it has none)."""
    sample = str(real_data("mindspore-cpu") / "graph-legacy-Profiler")
    assert main(["diff", sample, sample, "--by", "type", "--format", "json"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert rows and {row["Kind"] for row in rows} == {"host"}
    assert all(row["Base Count"] == row["New Count"] > 0 and not row["Significant"] for row in rows)
    assert "op types" not in captured.err


# -- --by comm -------------------------------------------------------------------------------------

def test_by_comm_sums_what_comm_reports_per_op_type_and_group(capsys):
    """Each row's Time, Wait, Transit and Bandwidth are ``comm``'s own figures of its ops (Elapse,
    Wait, Transit from the plane tasks; transit size over time), summed over the kept steps."""
    sample = real_data("ascend-pt-2rank")
    report = comm_report(sample)
    expected: dict[tuple[str, str], list] = {}
    ran: dict[str, set[int]] = {}
    for op in report.ops:
        ran.setdefault(op.group, set()).add(op.rank)
    assert all(group.startswith("hccl group ") for group in ran)  # named by a hash: by their ranks here
    for op in report.ops:
        group = "ranks " + "-".join(map(str, sorted(ran[op.group])))  # the sample's groups: ranks 0-1
        hccl_type = re.match(r"hcom_([A-Za-z]+)_", op.name)[1].lower()  # the sample's: all HCCL ops
        held = expected.setdefault((hccl_type, group), [0, 0, 0, 0, 0, 0])
        moved = list(op.transports.values())
        for i, value in enumerate((1, op.elapse_ns, op.wait_ns, op.transit_ns,
                                   sum(t.size_bytes for t in moved), sum(t.time_ns for t in moved))):
            held[i] += value
    code, rows = _json(capsys, ["diff", str(sample), str(sample), "--by", "comm"])
    assert code == 0 and {(r["Name"], r["Group"]) for r in rows} == set(expected)
    for row in rows:
        count, elapse, wait, transit, size, ns = expected[row["Name"], row["Group"]]
        assert row["Base Count"] == row["New Count"] == count
        assert row["Base Time(us)"] == pytest.approx(elapse / 1000, abs=1e-3)
        assert row["Base Wait(us)"] == pytest.approx(wait / 1000, abs=1e-3)
        assert row["Base Transit(us)"] == pytest.approx(transit / 1000, abs=1e-3)
        assert row["Base Bandwidth(GB/s)"] == round(size / ns, 4)
        assert row["Delta Bandwidth(GB/s)"] == 0 and row["Delta Wait(us)"] == 0 and not row["Significant"]


def test_comm_types_are_the_same_across_vendors():
    """The readers give one kind to one collective whatever the vendor calls it; --by comm rows
    are that kind."""
    from converters.readers import collectives

    assert {collectives.hccl(name) for name in ("hcom_allReduce__586_0_1", "Default/AllReduce-op534_0")} | {
        collectives.nccl(name) for name in ("ncclKernel_AllReduce_RING_LL_Sum_float",
                                            "ncclDevKernel_AllReduce_Sum_f32_RING_LL")} | {
        collectives.host(name) for name in ("c10d::allreduce_", "gloo:all_reduce")} == {"allreduce"}


def test_by_comm_names_the_collectives_of_a_cpu_run_by_what_they_do(capsys):
    """c10d's and gloo's collectives are rows of their kind (allreduce, barrier), not of the
    vendor's prefix: the kinds of the raw trace's c10d ops."""
    sample = real_data("kineto-gloo-2rank")
    raw = json.loads(next(sample.glob("*.pt.trace.json")).read_text())
    expected = {re.sub(r"_$", "", e["name"].removeprefix("c10d::")) for e in raw["traceEvents"]
                if e.get("cat") == "cpu_op" and e.get("name", "").startswith("c10d::")}
    _, rows = _json(capsys, ["diff", str(sample), str(sample), "--by", "comm"])
    assert {row["Name"] for row in rows} == expected == {"allreduce", "barrier"}


def test_a_run_without_plane_tasks_has_no_wait_transit_or_bandwidth_not_zero(capsys):
    sample = str(real_data("kineto-2rank"))
    _, rows = _json(capsys, ["diff", sample, sample, "--by", "comm"])
    assert rows and all(row[f"{side} {figure}"] is None for row in rows for side in ("Base", "New")
                        for figure in ("Wait(us)", "Transit(us)", "Bandwidth(GB/s)"))


_PARTS = st.builds(diff.CommParts, st.one_of(st.none(), st.integers(0, 10**9)),
                   st.one_of(st.none(), st.integers(0, 10**9)), st.integers(0, 10**9), st.integers(0, 10**9))


@given(st.lists(_PARTS, max_size=6), st.randoms())
def test_comm_parts_add_up_in_any_order_and_stay_unknown_only_where_no_op_knows(parts, random):
    shuffled = list(parts)
    random.shuffle(shuffled)
    total, again = (sum(p, diff.CommParts()) for p in (parts, shuffled))
    assert total == again
    for field in ("wait_ns", "transit_ns"):
        known = [getattr(p, field) for p in parts if getattr(p, field) is not None]
        assert getattr(total, field) == (sum(known) if known else None)
    assert (total.size_bytes, total.transport_ns) == (sum(p.size_bytes for p in parts),
                                                      sum(p.transport_ns for p in parts))
