"""MindData (readers/minddata.py): the data queue, the pipeline's operators and the host's CPU use
as counters of MindSpore 1.x detail traces, equal to the files they come from (each parsed here on
its own), and the report's data preparation and data-loading diagnosis that rest on them."""

from __future__ import annotations

import csv
import json
import shutil
from collections import defaultdict
from pathlib import Path

import jsonschema
import pytest
from conftest import real_data
from test_trace_processor import imported
from trace_check import read_chrome_json, read_perfetto

from converters.analyses.report import Thresholds, report_data, report_json
from converters.cli import main
from converters.readers import minddata
from fixtures.mindspore1x_gen import MINDDATA_OPS, write_minddata, write_mindspore1x_profile

SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "schemas/report.schema.json").read_text())


def _counters(profile: Path, out: Path) -> dict[str, dict[int, float]]:
    """MindData lane -> step start (ns) -> value, from the detail trace of ``profile``."""
    assert main([str(profile), "--kind", "detail", "-q", "-o", str(out)]) == 0
    found: dict[str, dict[int, float]] = defaultdict(dict)
    for _, path, ts, value in read_perfetto(out.read_bytes()).counters:
        if path[0] == "MindData":
            found[path[1]][ts] = value
    return found


def _step_starts(path: Path) -> dict[int, int]:
    """step -> start ns, from the step trace (ticks of 10 ns)."""
    with open(path, newline="") as f:
        return {int(row["step_num"]): int(row["start_point"]) * 10 for row in csv.DictReader(f)
                if row["step_num"] != "-" and int(row["start_point"])}


def _mindinsight_steps(stamps: list[int], records: list[tuple[int, int]]) -> list[int]:
    """The step of each CPU tick, by MindInsight's own loop (``records``: (step, time ms) in file
    order), written out as it is there, not as the reader does it."""
    steps, left, right = [], 0, 0
    for item in stamps:
        while right < len(records):
            if item <= records[right][1]:
                steps.append(records[left][0] if item < records[right][1] else records[right][0])
                break
            left = right
            right += 1
        if right == len(records):
            steps.append(records[right - 1][0])
    return steps


def test_the_real_samples_queue_pipeline_and_cpu_in_the_trace_equal_their_files(tmp_path):
    folder = real_data("mindspore-1x/single-device")
    counters = _counters(folder, tmp_path / "out.pftrace")
    start = _step_starts(folder / "step_trace_raw_1_detail_time.csv")
    queue = [line.split() for line in (folder / "device_queue_profiling_1.txt").read_text().splitlines()]
    queue = [fields for fields in queue if fields[0] == "1"]
    assert queue, "the sample's device queue has queue records"
    for _, capacity, step, size, _ in queue:
        assert counters["Data queue: size"] == {start[int(step)]: float(size)}
        assert counters["Data queue: capacity"] == {start[int(step)]: float(capacity)}
    pipeline = json.loads((folder / "pipeline_profiling_1.json").read_text())
    records = [(int(f[2]), int(f[4])) for f in queue]
    cpu = json.loads((folder / "minddata_cpu_utilization_1.json").read_text())
    ticks = _mindinsight_steps(cpu["time_stamp"], records)
    for op in pipeline["op_info"]:
        name = f"Op {op['op_id']} {op['op_type']}"
        assert counters[f"{name}: workers"] == {start[1]: float(op["num_workers"])}
        if op["metrics"]:
            sizes = op["metrics"]["output_queue"]["size"]
            mine = [size for size, step in zip(sizes, ticks, strict=False) if step == 1]
            capacity = float(op["metrics"]["output_queue"]["length"])
            assert counters[f"{name}: queue capacity"] == {start[1]: capacity}
            assert counters[f"{name}: queue size"] == {start[1]: sum(mine) / len(mine)}
    with open(folder / "minddata_pipeline_raw_1.csv", newline="") as f:  # MindInsight's CSV of the same
        for row in csv.DictReader(f):
            assert counters[f"Op {row['op_id']} {row['op_type']}: queue size"][start[1]] == \
                float(row["output_queue_average_size"])  # every tick falls in step 1
    for key, subject in (("device_info", "Machine CPU"), ("process_info", "Process CPU")):
        for metric, values in cpu[key].items():
            if metric.endswith("_utilization"):
                label = metric.removesuffix("_utilization")
                assert counters[f"{subject}: {label} %"] == {start[1]: sum(values) / len(values)}
    for op in cpu["op_info"]:
        name = next(f"Op {o['op_id']} {o['op_type']}" for o in pipeline["op_info"]
                    if o["op_id"] == op["op_id"])
        for metric, values in op["metrics"].items():
            label = metric.removesuffix("_utilization")
            assert counters[f"{name}: CPU {label} %"] == {start[1]: sum(values) / len(values)}


def test_the_pipeline_from_mindinsights_csv_alone_equals_the_json(tmp_path):
    """Without MindSpore's JSON the reader takes MindInsight's CSV of it: the same workers,
    capacities and queue sizes (the CSV leaves out the operators without a queue)."""
    folder = real_data("mindspore-1x/single-device")
    both = _counters(folder, tmp_path / "both.pftrace")
    copy = tmp_path / "profiler"
    shutil.copytree(folder, copy)
    (copy / "pipeline_profiling_1.json").unlink()
    alone = _counters(copy, tmp_path / "csv.pftrace")
    with_queue = {lane: v for lane, v in both.items() if not lane.startswith("Op 4 EpochCtrlOp")}
    assert alone == with_queue


@pytest.mark.parametrize("pipeline", ["json", "csv"])
def test_generated_minddata_in_the_trace_equals_the_files(tmp_path, pipeline):
    prof = write_mindspore1x_profile(tmp_path / "job", ranks=1, steps=4, ops_per_step=30, seed=5)
    rank = prof.ranks[0]
    wrote = write_minddata(rank, empty_steps={2}, ticks_per_step=3, pipeline=pipeline, seed=5)
    counters = _counters(prof.root, tmp_path / "out.pftrace")
    start = _starts(rank)
    assert counters["Data queue: size"] == {start[s]: float(n) for s, n in wrote["queue"].items()}
    assert set(counters["Data queue: capacity"].values()) == {float(wrote["capacity"])}
    steps = [step for step, _ in wrote["ticks"]]
    for (op_id, kind, workers, capacity), sizes in zip(MINDDATA_OPS, wrote["op_sizes"], strict=True):
        name = f"Op {op_id} {kind}"
        assert set(counters[f"{name}: workers"].values()) == {float(workers)}
        assert set(counters[f"{name}: queue capacity"].values()) == {float(capacity)}
        expected = {start[s]: sum(v for v, t in zip(sizes, steps, strict=True) if t == s) / steps.count(s)
                    for s in start}
        assert counters[f"{name}: queue size"] == expected
    user = wrote["cpu"]["device_info"]["user_utilization"]
    assert counters["Machine CPU: user %"] == {
        start[s]: sum(v for v, t in zip(user, steps, strict=True) if t == s) / steps.count(s) for s in start}
    assert not any(lane.startswith("Op -1") for lane in counters)  # not a pipeline operator


@pytest.mark.parametrize("name", ["out.pftrace", "out.json"])
def test_generated_minddata_loads_in_the_trace_processor_with_every_counter(tmp_path, name):
    prof = write_mindspore1x_profile(tmp_path / "job", ranks=2, steps=3, ops_per_step=30, seed=4)
    for rank in prof.ranks:
        write_minddata(rank, empty_steps={1}, seed=4)
    out = tmp_path / name
    assert main([str(prof.root), "--kind", "detail", "-q", "-o", str(out)]) == 0
    decoded = (read_perfetto if name.endswith(".pftrace") else read_chrome_json)(out.read_bytes())
    problems, (_, counters, _) = imported(out, tmp_path)
    assert problems == []
    assert counters == len(decoded.counters) > 0
    lanes = {path[-1] for _, path, _, _ in decoded.counters}  # JSON names a counter by its lane alone
    assert {"Data queue: size", "Op 1 MapOp: workers", "Process CPU: user %"} <= lanes


def test_queue_records_without_times_leave_the_ticks_out_with_a_note(tmp_path):
    """The four-field queue lines (older MindSpore) give no times: the queue is drawn per step,
    the sampled figures cannot be placed in steps and are left out, said once."""
    prof = write_mindspore1x_profile(tmp_path / "job", ranks=1, steps=3, ops_per_step=30, seed=1)
    rank = prof.ranks[0]
    write_minddata(rank, seed=1)
    device = rank.folder / f"device_queue_profiling_{rank.file_id}.txt"
    device.write_text("".join(" ".join(line.split()[:4]) + "\n" for line in device.read_text().splitlines()))
    counters = _counters(prof.root, tmp_path / "out.pftrace")
    assert len(counters["Data queue: size"]) == 3
    assert not any(lane.endswith("queue size") or "CPU" in lane for lane in counters)
    report = report_data(prof.root)
    assert any("no times to place them" in w for w in report.warnings)


def test_a_broken_pipeline_or_cpu_file_leaves_its_figures_out_with_a_warning(tmp_path):
    prof = write_mindspore1x_profile(tmp_path / "job", ranks=1, steps=3, ops_per_step=30, seed=6)
    rank = prof.ranks[0]
    write_minddata(rank, seed=6)
    (rank.folder / f"pipeline_profiling_{rank.file_id}.json").write_text('{"op_info": [')
    (rank.folder / f"minddata_cpu_utilization_{rank.file_id}.json").write_text("[1, 2]")
    counters = _counters(prof.root, tmp_path / "out.pftrace")
    assert set(counters) == {"Data queue: size", "Data queue: capacity"}
    report = report_data(prof.root)
    assert sum("MindData's figures from it left out" in w for w in report.warnings) == 2


def test_the_device_queue_is_preferred_to_the_iterators(tmp_path):
    prof = write_mindspore1x_profile(tmp_path / "job", ranks=1, steps=3, ops_per_step=30, seed=2)
    rank = prof.ranks[0]
    wrote = write_minddata(rank, seed=2)
    records = minddata.read_queue(rank.folder / f"device_queue_profiling_{rank.file_id}.txt",
                                  _Diag())
    assert {r.step: r.size for r in records} == wrote["queue"]
    (rank.folder / f"device_queue_profiling_{rank.file_id}.txt").unlink()
    iterator = [line.split() for line in
                (rank.folder / f"dataset_iterator_profiling_{rank.file_id}.txt").read_text().splitlines()]
    counters = _counters(prof.root, tmp_path / "out.pftrace")
    start = _starts(rank)
    assert counters["Data queue: size"] == {start[int(f[2])]: float(f[3]) for f in iterator}


def _starts(rank) -> dict[int, int]:
    """step -> its start on the trace (epoch ns where host_start.log maps the device clock)."""
    return {step: start + (rank.epoch_offset_ns or 0) for step, start, _ in rank.step_bounds_ns}


class _Diag:
    def warn(self, key: str, text: str) -> None:
        raise AssertionError(text)

    note = warn


# -- the report ---------------------------------------------------------------------------------

def _data_loading(report) -> dict[int, dict]:
    return {d.step: d.evidence for d in report.diagnoses if d.kind == "data_loading"}


def test_an_empty_queue_at_the_steps_start_is_data_loading_bound(tmp_path):
    prof = write_mindspore1x_profile(tmp_path / "job", ranks=1, steps=5, ops_per_step=30, seed=7)
    write_minddata(prof.ranks[0], empty_steps={2, 4}, seed=7)
    report = report_data(prof.root)
    found = _data_loading(report)
    assert set(found) == {2, 4}
    assert all(e["queue_size"] == 0 and e["queue_capacity"] == 64 for e in found.values())
    document = report_json(report)
    jsonschema.validate(document, SCHEMA)
    prepared = document["data_preparation"]
    assert prepared["empty_queue_steps"] == 2 and prepared["queue_steps"] == 5
    assert [s["step"] for s in prepared["steps"] if s["queue_empty"]] == [2, 4]
    types = [o["op_type"] for o in prepared["operators"]]
    assert types == [kind for _, kind, _, _ in MINDDATA_OPS] + ["EpochCtrlOp"]
    summary = next(d.summary for d in report.diagnoses if d.kind == "data_loading")
    assert "the data queue was empty at the step's start (0 of 64 batches)" in summary


def test_a_queue_that_never_runs_empty_is_never_data_loading_bound(tmp_path):
    """Holding batches at every step's start, the data was ready: no data-loading finding, even
    where the step gap passes its threshold (set to 0 here)."""
    prof = write_mindspore1x_profile(tmp_path / "job", ranks=1, steps=5, ops_per_step=30, seed=7)
    write_minddata(prof.ranks[0], seed=7)
    report = report_data(prof.root, thresholds=Thresholds(data_loading_share=0.0))
    assert _data_loading(report) == {}
    document = report_json(report)
    jsonschema.validate(document, SCHEMA)
    assert document["data_preparation"]["empty_queue_steps"] == 0
    without = write_mindspore1x_profile(tmp_path / "plain", ranks=1, steps=5, ops_per_step=30, seed=7)
    plain = report_data(without.root, thresholds=Thresholds(data_loading_share=0.0))
    assert set(_data_loading(plain)) == {1, 2, 3, 4, 5}  # without the queue, the threshold rule
    assert "data_preparation" not in report_json(plain)


def test_the_html_report_shows_data_preparation_only_where_recorded(tmp_path):
    prof = write_mindspore1x_profile(tmp_path / "job", ranks=1, steps=4, ops_per_step=30, seed=3)
    write_minddata(prof.ranks[0], empty_steps={1}, seed=3)
    out = tmp_path / "report.html"
    assert main(["report", str(prof.root), "-q", "-o", str(out)]) == 0
    page = out.read_text()
    assert '<section id="data"><h2>Data preparation</h2>' in page and 'href="#data"' in page
    assert "empty in 1 of 4 steps" in page
    plain = write_mindspore1x_profile(tmp_path / "plain", ranks=1, steps=2, ops_per_step=30, seed=3)
    assert main(["report", str(plain.root), "-q", "-o", str(tmp_path / "plain.html")]) == 0
    assert 'id="data"' not in (tmp_path / "plain.html").read_text()
