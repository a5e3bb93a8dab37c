"""Traces of real size in the orders that break streaming readers: torch_npu, PyTorch, Paddle.

Real files are hundreds of MB, and torch_npu writes the process and thread names after the
events they name (the generator puts them at the very end of real-sized files). A reader that
names lanes as it streams loses every event before the names, the steps among them: the old
reader printed one row without a step. This is the one test here of that size: it runs in
``make test`` and takes well under a minute on 2 cores (the same orders are tested on small files
read in small batches in tests/readers/test_ascend_pt_generated.py and test_chrome_trace.py).
"""

from __future__ import annotations

import csv
import io
import shutil

import pytest

from converters import Diagnostics, Layer, Options, discover, overlap_report, read_profile
from converters.cli import main
from fixtures.ascend_pt_gen import write_ascend_pt_profile
from fixtures.kineto_gen import write_kineto_traces
from fixtures.paddle_gen import generate_profile

COLUMNS = ("Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free", "Stage",
           "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing")


@pytest.fixture
def large(tmp_path):
    """The 250 MB profile, deleted afterwards: pytest keeps its last runs' folders."""
    generated = write_ascend_pt_profile(tmp_path, ranks=1, steps=16, tasks_per_step=6000,
                                        with_kernel_details=False, seed=11)  # names last: real size
    yield generated
    shutil.rmtree(generated.ranks[0].path)


def test_every_step_of_a_250_mb_trace_with_its_names_last_equals_the_truth(large, tmp_path, capsys):
    (rank,) = large.ranks
    output = rank.path / "ASCEND_PROFILER_OUTPUT"
    trace = output / "trace_view.json"
    assert trace.stat().st_size > 250_000_000
    assert trace.read_bytes()[-300:].count(b'"ph":"M"') > 3  # the names are at the end
    with open(output / "step_trace_time.csv", newline="") as f:
        truth = {row["Step"]: row for row in csv.DictReader(f)}
    assert main(["overlap", str(tmp_path), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [row["Step"] for row in rows] == [str(step) for step in rank.steps] == list(truth)
    for row in rows:
        for column in COLUMNS:
            want, got = float(truth[row["Step"]][column]), float(row[column])
            assert abs(got - want) <= max(0.001 * want, 1), (row["Step"], column)


def test_every_step_of_a_300_mb_pytorch_trace_out_of_order_with_its_names_last_equals_the_truth(tmp_path):
    """PyTorch's profiler at real size: events shuffled, names last; the overlap table per step
    must be the generator's truth to the ns."""
    manifest = write_kineto_traces(tmp_path, ranks=1, steps=1, target_mb=300, shuffle=True,
                                   metadata_last=True, seed=11).manifest
    (file,) = manifest["rank_files"]
    assert file["bytes"] > 250_000_000 and len(file["steps"]) > 100
    rows = {row.step: row for row in overlap_report(tmp_path)}
    for step in file["steps"]:
        row = rows.pop(step["step"])
        assert (row.computing_ns, row.communication_ns, row.overlapped_ns) == (
            step["compute_ns"], step["comm_ns"], step["overlap_ns"]), step["step"]
    assert not rows
    (tmp_path / file["file"]).unlink()


@pytest.mark.parametrize("form", ["chrome", "protobuf"])
def test_a_200_mb_paddle_gpu_profile_out_of_order_converts_whole_and_equals_the_truth(tmp_path, form):
    """Paddle's two exports at size (the JSON's events shuffled, the protobuf's node lists in the
    breadth-first order Paddle writes): every step, and each step's kernels counted once."""
    (truth,) = generate_profile(tmp_path, form=form, steps=2, target_mb=200 if form == "chrome" else 60,
                                gpu=True, shuffle=form == "chrome", seed=11).files
    assert truth.size > (150_000_000 if form == "chrome" else 50_000_000)
    batches = {b.step_id: b for b in read_profile(discover(tmp_path), Options(kind="summary"), Diagnostics())}
    assert sorted(batches) == [step.number for step in truth.steps]
    kernels = sum(1 for b in batches.values() for s in b.slices if s.layer is Layer.STREAM)
    launched = [d for step in truth.steps for d in step.device if d["type"] == "Kernel" and not d["comm"]]
    assert kernels == len(launched)
    truth.path.unlink()
