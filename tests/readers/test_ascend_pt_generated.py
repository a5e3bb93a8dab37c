"""The ascend_pt reader on generated profiles: runs without the real data too."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from trace_check import read_perfetto

from converters import Diagnostics, Layer, Options, discover, overlap_report, read_profile, step_overlap
from converters.cli import main
from converters.readers import chrome_trace
from fixtures.ascend_pt_gen import write_ascend_pt_profile

COLUMNS = {"Computing": "computing_ns", "Communication(Not Overlapped)": "not_overlapped_ns",
           "Overlapped": "overlapped_ns", "Communication": "communication_ns", "Free": "free_ns"}


def _vendor_totals(rank_dir: Path) -> dict[int, dict[str, float]]:
    with open(rank_dir / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as f:
        return {int(row["Step"]): row for row in csv.DictReader(f)}


@pytest.fixture(params=["as torch_npu writes it", "metadata last, small batches"])
def metadata_last(request, monkeypatch) -> bool:
    """Both file orders; in the adversarial one the file is read in 64 KiB batches, so the
    process and thread names come batches after the events they name, as in real 1 GB files."""
    if request.param.startswith("metadata last"):
        monkeypatch.setattr(chrome_trace, "BATCH_BYTES", 64 << 10)
        return True
    return False


@pytest.mark.parametrize("source", ["trace_view", "kernel_details"])
def test_step_totals_equal_the_generated_step_trace_time(tmp_path, source, metadata_last):
    generated = write_ascend_pt_profile(tmp_path, ranks=2, steps=3, seed=4, metadata_last=metadata_last,
                                        with_trace_view=source == "trace_view")
    batches = list(read_profile(discover(tmp_path), Options(), Diagnostics()))
    assert sorted((b.rank, b.step_id) for b in batches) == [
        (r.rank, s) for r in generated.ranks for s in r.steps]
    for batch in batches:
        rank_dir = next(r.path for r in generated.ranks if r.rank == batch.rank)
        expected = _vendor_totals(rank_dir)[batch.step_id]
        o = step_overlap(batch)
        for column, attribute in COLUMNS.items():
            want = float(expected[column]) * 1000
            assert abs(getattr(o, attribute) - want) <= max(0.001 * want, 1000), (batch.rank, column)


def test_detail_holds_every_task_once_and_loads_cleanly(out_dir, tmp_path, metadata_last):
    generated = write_ascend_pt_profile(tmp_path, ranks=2, steps=2, seed=6, metadata_last=metadata_last)
    out = out_dir / "out.pftrace"
    assert main([str(tmp_path), "--kind", "detail", "--max-size", "0", "-o", str(out)]) == 0
    decoded = read_perfetto(out.read_bytes())
    device = sum(1 for s in decoded.slices if s.track[0] == "Ascend Hardware")
    comm = sum(1 for s in decoded.slices if s.track[0] == "Communication")
    assert device == sum(r.device_tasks for r in generated.ranks)
    assert comm == sum(r.hccl_tasks + r.hccl_ops for r in generated.ranks)


@pytest.mark.parametrize("version", ["2023", "2025", "2.7.1"])
def test_kernel_details_columns_are_found_by_name_in_every_version(tmp_path, version):
    write_ascend_pt_profile(tmp_path, ranks=1, steps=2, seed=2, with_trace_view=False,
                            kernel_details_version=version)
    batches = list(read_profile(discover(tmp_path), Options(kind="detail"), Diagnostics()))
    assert [b.step_id for b in batches] == [50, 51]
    assert all(any(s.layer is Layer.COMM_OP for s in b.slices) for b in batches)


def test_single_card_run_is_rank_0_and_mindspore_layout_is_read(tmp_path):
    write_ascend_pt_profile(tmp_path / "pt", single_card=True, seed=1)
    assert [r.rank for r in discover(tmp_path / "pt")] == [0]
    write_ascend_pt_profile(tmp_path / "ms", ranks=2, framework="ms", seed=1)
    assert [r.rank for r in discover(tmp_path / "ms")] == [0, 1]


def test_database_form_converts_end_to_end(out_dir, tmp_path):
    from fixtures.ascend_db_gen import write_ascend_db

    rank_dir = tmp_path / "worker_1_20250109_ascend_pt"
    counts = write_ascend_db(rank_dir / "ASCEND_PROFILER_OUTPUT", rank=3, steps=3, seed=2)
    (ranks,) = [discover(tmp_path)]
    assert [(r.rank, r.source_paths[0].suffix) for r in ranks] == [(3, ".db")]
    out = out_dir / "db.pftrace"
    assert main([str(tmp_path), "--kind", "detail", "--max-size", "0", "-o", str(out)]) == 0
    decoded = read_perfetto(out.read_bytes())
    assert sum(1 for s in decoded.slices if s.track[0] == "Ascend Hardware") == counts["device_tasks"]
    assert sum(1 for s in decoded.slices if s.track[0] == "Communication") == (
        counts["comm_tasks"] + counts["comm_ops"])
    assert len({s.name for s in decoded.slices if s.track[0] == "Step Trace"}) == counts["steps"]


def test_parallel_groups_are_kept_and_shown_in_the_rank_description(out_dir, tmp_path):
    import orjson

    generated = write_ascend_pt_profile(tmp_path, ranks=2, steps=1, seed=3)
    metadata = orjson.loads((generated.ranks[0].path / "profiler_metadata.json").read_bytes())
    groups = metadata["parallel_group_info"]
    info = discover(tmp_path)[0]
    assert {tuple(g["global_ranks"]) for g in groups.values()} == set(info.groups.values())
    out = out_dir / "g.pftrace"
    assert main([str(tmp_path), "-o", str(out)]) == 0
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    trace.ParseFromString(out.read_bytes())
    processes = [p.track_descriptor for p in trace.packet if p.track_descriptor.HasField("process")]
    assert len(processes) == 2 and all("groups: " in d.description for d in processes)


def test_kernel_details_only_leaves_preparing_unknown_and_names_a_rank_without_data(tmp_path, capsys):
    generated = write_ascend_pt_profile(tmp_path, ranks=3, steps=2, seed=8, with_trace_view=False)
    empty = generated.ranks[2].path
    for path in (empty / "ASCEND_PROFILER_OUTPUT").iterdir():  # not even the profiler's analysis left
        path.unlink()
    assert main(["overlap", str(tmp_path), "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    rows = list(csv.DictReader(out.splitlines()))
    assert {row["Rank"] for row in rows} == {"0", "1"}
    assert all(row["Preparing"] == "" and row["Computing"] != "" for row in rows)  # empty, not 0
    assert f"rank 2 ({empty}): a profiler rank folder without" in err and "left out" in err


def test_pipeline_parallel_columns_follow_torch_npus_definitions(tmp_path):
    """A stage-1 rank of a PP job, kernel_details.csv only, its figures worked out by hand with
    torch_npu's TraceStepTimeParser: Bubble is the time in hcom_receive ops (hcom_batchSendRecv
    is not a receive), Stage the device span minus Bubble, Preparing unknown without a host."""
    rank_dir = tmp_path / "node_1_2_ascend_pt"
    (rank_dir / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (rank_dir / "profiler_info_2.json").write_text('{"rank_id": 2}')
    rows = [  # name, type, core, start µs after T, duration µs
        ("hcom_receive__1_0_1", "hcom_receive_", "HCCL", 0, 100),
        ("MatMul_1", "MatMul", "AI_CORE", 100, 50),
        ("Add_2", "Add", "AI_VECTOR_CORE", 160, 20),
        ("hcom_batchSendRecv__1_1_1", "hcom_batchSendRecv_", "HCCL", 170, 40),
        ("hcom_send__1_2_1", "hcom_send_", "HCCL", 230, 30),
        ("Cast_3", "Cast", "AI_VECTOR_CORE", 240, 10),
    ]
    t = 1736408883700000
    with open(rank_dir / "ASCEND_PROFILER_OUTPUT/kernel_details.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Step Id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State",
                    "Accelerator Core", "Start Time(us)", "Duration(us)"])
        for i, (name, kind, core, start, dur) in enumerate(rows):
            stream = "N/A" if core == "HCCL" else "2"
            w.writerow([7, 4294967295, i, stream, name, kind, "dynamic", core, f"{t + start}.000\t", dur])
    (row,) = overlap_report(tmp_path)
    us = {k: None if v is None else v / 1000 for k, v in vars(row).items() if k.endswith("_ns")}
    assert (row.rank, row.step) == (2, 7)
    assert us == {"computing_ns": 80, "communication_ns": 170, "not_overlapped_ns": 150, "overlapped_ns": 20,
                  "free_ns": 30, "bubble_ns": 100, "stage_ns": 160, "not_overlapped_excluding_receive_ns": 50,
                  "preparing_ns": None}


ALL_COLUMNS = {**COLUMNS, "Stage": "stage_ns", "Bubble": "bubble_ns", "Preparing": "preparing_ns",
               "Communication(Not Overlapped and Exclude Receive)": "not_overlapped_excluding_receive_ns"}


@pytest.mark.parametrize("source", ["trace_view", "kernel_details"])
def test_a_pipeline_parallel_job_equals_the_generators_step_trace_time(tmp_path, source, metadata_last):
    """A PP2 x DP2 job: hcom_receive waits are its bubbles, hcom_batchSendRecv is no receive; from
    kernel_details.csv alone Preparing is unknown (no host step start), every other column known."""
    generated = write_ascend_pt_profile(tmp_path, ranks=4, pp=2, steps=2, seed=12,
                                        metadata_last=metadata_last, with_trace_view=source == "trace_view")
    rows = overlap_report(tmp_path)
    assert [(r.rank, r.step) for r in rows] == [(r.rank, s) for r in generated.ranks for s in r.steps]
    for row in rows:
        expected = _vendor_totals(generated.ranks[row.rank].path)[row.step]
        for column, attribute in ALL_COLUMNS.items():
            got = getattr(row, attribute)
            if column == "Preparing" and source == "kernel_details":
                assert got is None
                continue
            want = float(expected[column]) * 1000
            assert abs(got - want) <= max(0.001 * want, 1000), (row.rank, row.step, column)
        assert row.bubble_ns > 0


def test_a_pipeline_rank_without_kernel_data_is_read_from_the_profilers_analysis(tmp_path, capsys):
    """Its kernel_details.csv deleted, a rank still has the profiler's step_trace_time.csv: its row
    is that file's (tests/test_analysis_only.py has the rest)."""
    generated = write_ascend_pt_profile(tmp_path, ranks=4, pp=2, steps=2, seed=13, with_trace_view=False)
    missing = generated.ranks[3].path
    (missing / "ASCEND_PROFILER_OUTPUT/kernel_details.csv").unlink()
    assert main(["overlap", str(tmp_path), "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    rows = [row for row in csv.DictReader(out.splitlines())]
    assert {row["Rank"] for row in rows} == {"0", "1", "2", "3"} and "left out" not in err
    with open(missing / "ASCEND_PROFILER_OUTPUT/step_trace_time.csv", newline="") as f:
        theirs = {row["Step"]: round(float(row["Computing"]), 3) for row in csv.DictReader(f)}
    assert {row["Step"]: round(float(row["Computing"]), 3) for row in rows if row["Rank"] == "3"} == theirs


def test_a_kernel_details_file_without_rows_is_said(tmp_path):
    generated = write_ascend_pt_profile(tmp_path, ranks=2, steps=1, seed=14, with_trace_view=False)
    path = generated.ranks[1].path / "ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    path.write_text(path.read_text().splitlines()[0] + "\n")
    diag = Diagnostics()
    assert [r.rank for r in overlap_report(tmp_path, diag=diag)] == [0]
    assert any(m.startswith(f"{path}: no kernel rows") for m in diag.messages())


def test_info_and_overlap_count_every_step_of_a_file_with_its_names_last(tmp_path, monkeypatch, capsys):
    from converters.analyses.info import info_report

    monkeypatch.setattr(chrome_trace, "BATCH_BYTES", 32 << 10)
    generated = write_ascend_pt_profile(tmp_path, ranks=2, steps=4, seed=15, metadata_last=True,
                                        with_kernel_details=False)
    ranks = info_report(tmp_path).ranks
    assert [[s.step for s in r.steps] for r in ranks] == [r.steps for r in generated.ranks]
    assert main(["overlap", str(tmp_path), "--format", "csv"]) == 0
    rows = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert [(int(r["Rank"]), int(r["Step"])) for r in rows] == [
        (r.rank, s) for r in generated.ranks for s in r.steps]


def test_perfettos_importer_takes_a_pipeline_job_with_its_names_last_without_a_repair(tmp_path,
                                                                                     monkeypatch):
    from test_trace_processor import imported  # skips without the trace processor

    from converters import convert

    monkeypatch.setattr(chrome_trace, "BATCH_BYTES", 64 << 10)
    write_ascend_pt_profile(tmp_path / "job", ranks=4, pp=2, steps=2, seed=16, metadata_last=True)
    out = tmp_path / "pp.pftrace"
    result = convert(tmp_path / "job", out, kind="detail", max_bytes=None)
    decoded = read_perfetto(out.read_bytes())
    problems, counts = imported(out, tmp_path)
    assert problems == [] and counts == (len(decoded.slices), len(decoded.counters), decoded.flows)
    assert result.steps == 2 and decoded.flows > 1000
