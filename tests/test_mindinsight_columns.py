"""``overlap --mindinsight``: MindSpore's own cluster step trace columns beside torch_npu's (issue 40:
a MindSpore 1.x pipeline user saw Bubble 171 ms where MindInsight's cluster page said receive_alone
56 ms, and no stage_time). The truth is MindSpore's definition (``_get_cluster_timeline``) applied
here to the generator's raw files: the op timeline and AI CPU file for compute, the step trace's
per-collective columns for the communication ops, each filed under the step its start lies in."""

from __future__ import annotations

import bisect
import csv
import json
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest

from converters.cli import main
from fixtures.mindspore1x_gen import write_mindspore1x_profile


def _union(intervals):
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def _gaps(merged):
    return [(a[1], b[0]) for a, b in zip(merged, merged[1:], strict=False) if b[0] > a[1]]


def _within(intervals, gaps):
    return sum(max(0, min(e, ge) - max(s, gs)) for s, e in intervals for gs, ge in gaps)


def _truth(rank) -> dict[int, dict[str, float]]:
    """Per step, MindSpore's five figures in µs, from the rank's raw files."""
    folder, fid = rank.folder, rank.file_id
    with open(folder / f"step_trace_raw_{fid}_detail_time.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["step_num"] not in ("-", "0")]
    steps = [(int(r["step_num"]), int(r["start_point"]) * 10, int(r["end_point"]) * 10) for r in rows]
    starts = [s for _, s, _ in steps]
    compute: dict[int, list] = {n: [] for n, _, _ in steps}
    receive: dict[int, list] = {n: [] for n, _, _ in steps}
    other: dict[int, list] = {n: [] for n, _, _ in steps}

    def file(into, start, end):
        at = bisect.bisect_right(starts, start) - 1
        if at >= 0 and start < steps[at][2]:
            into[steps[at][0]].append((start, end))

    with open(folder / f"output_timeline_data_{fid}.txt") as f:
        next(f)
        for line in f:
            _, _, start, dur = line.rsplit(",", 3)
            begin = int(Decimal(start) * 10**6)
            file(compute, begin, begin + int(Decimal(dur) * 10**6))
    with open(folder / f"aicpu_intermediate_{fid}.csv", newline="") as f:
        for r in csv.DictReader(f):
            file(compute, int(Decimal(r["run_start"]) * 1000), int(Decimal(r["run_end"]) * 1000))
    for r in rows:
        for column in r:
            if column.endswith("_start_point") and column != "start_point" and int(r[column]):
                name = column.removesuffix("_start_point")
                span = (int(r[column]) * 10, int(r[f"{name}_end_point"]) * 10)
                file(receive if "_Receive-op" in name else other, *span)
    out = {}
    for number, start, end in steps:
        step = end - start
        merged = _union(compute[number])
        comm_alone = _within(_union(receive[number] + other[number]), _gaps(merged))
        receive_alone = _within(_union(receive[number]), _gaps(_union(compute[number] + other[number])))
        out[number] = {"computation_time": step - comm_alone, "communication_alone_time": comm_alone,
                       "stage_time": step - receive_alone, "receive_alone_time": receive_alone,
                       "collective_communication_alone_time": _within(_union(other[number]), _gaps(merged))}
    return {n: {k: v / 1000 for k, v in figures.items()} for n, figures in out.items()}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    root = tmp_path_factory.mktemp("pp")
    return root, write_mindspore1x_profile(root, ranks=4, steps=3, comm_ops=1, pp=2, seed=11)


def test_mindsporess_cluster_columns_beside_stage_and_bubble(pipeline, capsys):
    root, job = pipeline
    assert main(["overlap", str(root), "--mindinsight", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    jsonschema.validate(document, json.loads((Path(__file__).parent.parent / "schemas/overlap.schema.json")
                                             .read_text()))
    rows = {(r["Rank"], r["Step"]): r for r in document}
    compared = 0
    for rank in job.ranks:
        for step, figures in _truth(rank).items():
            row = rows[rank.rank, step]
            for name, value in figures.items():
                assert row[name] == pytest.approx(value, abs=0.002), (rank.rank, step, name)
            compared += 1
            assert row["receive_alone_time"] < row["Bubble"]  # a receive under other work is no bubble
    assert compared == 4 * 3


def test_without_the_option_the_table_is_as_before_and_unknown_stays_unknown(tmp_path, capsys):
    root = tmp_path / "cut"
    write_mindspore1x_profile(root, ranks=2, steps=4, timeline_ends_in_step=2, seed=2)
    assert main(["overlap", str(root), "--format", "json"]) == 0
    assert not any("stage_time" in r for r in json.loads(capsys.readouterr().out))
    assert main(["overlap", str(root), "--mindinsight", "--format", "json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out) if r["Step"] is not None and r["Step"] >= 2]
    assert rows and all(r["stage_time"] is None and r["receive_alone_time"] is None for r in rows)
