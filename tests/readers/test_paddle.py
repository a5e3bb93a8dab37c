"""The Paddle reader on generated GPU jobs (``fixtures.paddle_gen``, written from Paddle's exporter
source and checked against the real CPU samples), both forms, against the generator's truth."""

from __future__ import annotations

import bisect
from collections import Counter

import pytest

from converters import Diagnostics, Layer, Options, convert, discover, overlap_report, read_profile
from converters.intervals import union
from fixtures.paddle_gen import generate_profile

HOST_CATS = ("Operator", "OperatorInner", "UserDefined", "DygraphKernelLaunch", "Communication", "PythonOp",
             "PythonUserDefined")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    made = {}
    for form in ("chrome", "protobuf"):
        root = tmp_path_factory.mktemp(form)
        made[form] = (root, generate_profile(root, form=form, steps=4, seed=7, gpu=True, ranks=2, memory=True,
                                             worker_name="rank{rank}"))
    return made


def _batches(root, kind="detail", **options):
    return list(read_profile(discover(root), Options(kind=kind, **options), Diagnostics()))


@pytest.mark.parametrize("form", ["chrome", "protobuf"])
def test_every_event_lands_once_on_the_lane_of_its_kind(jobs, form):
    root, truth = jobs[form]
    batches = _batches(root)
    for file in truth.files:
        mine = [s for b in batches if b.rank == file.rank for s in b.slices if s.layer is not Layer.OVERLAP]
        counts = file.counts
        device = sum(counts.get(kind, 0) for kind in ("Kernel", "Memcpy", "Memset"))
        host = sum(counts.get(cat, 0) for cat in HOST_CATS) + counts["CudaRuntime"] + counts.get("memory", 0)
        phases = sum(counts.get(cat, 0) for cat in ("Dataloader", "Forward", "Backward", "Optimization"))
        by_layer = Counter(s.layer for s in mine)
        assert by_layer[Layer.STREAM] + by_layer[Layer.COMM_OP] == device + counts.get("Communication", 0)
        assert by_layer[Layer.COMM_OP] == counts["comm_kernels"] + counts.get("Communication", 0) > 0
        assert by_layer[Layer.HOST] == host - counts.get("Communication", 0)
        assert by_layer[Layer.STEP] == phases + counts["ProfileStep"]


@pytest.mark.parametrize("form", ["chrome", "protobuf"])
def test_every_device_event_is_linked_to_the_runtime_call_that_launched_it(jobs, form):
    root, truth = jobs[form]
    slices = [s for b in _batches(root) for s in b.slices]
    ends = [s for s in slices if s.flows_in]
    launched = sum(len(step.device) for file in truth.files for step in file.steps)
    assert sum(len(s.flows_in) for s in ends) == sum(len(s.flows_out) for s in slices) == launched
    assert {s.layer for s in ends} == {Layer.STREAM, Layer.COMM_OP}


@pytest.mark.parametrize("form", ["chrome", "protobuf"])
def test_steps_phases_and_device_time_equal_the_truth(jobs, form):
    root, truth = jobs[form]
    for batch in _batches(root, "summary"):
        file = truth.files[batch.rank]
        (step,) = [s for s in file.steps if s.number == batch.step_id]
        slack = 0 if form == "protobuf" else 1000  # the JSON form's ts is whole µs
        assert abs(batch.step.start_ns - step.start_ns) <= slack
        for phase, ns in step.phases.items():
            mine = sum(e - s for s, e in union((x.start_ns, x.end_ns) for x in batch.slices
                                                if x.lane == phase))
            assert abs(mine - ns) <= slack * 4, (phase, batch.rank, batch.step_id)
    rows = {(r.rank, r.step): r for r in overlap_report(root)}
    for file in truth.files:  # a kernel goes with the step it starts in, not the one that launched it
        starts = [step.start_ns for step in file.steps]
        filed: dict[int, list] = {step.number: [] for step in file.steps}
        for d in (d for step in file.steps for d in step.device if d["type"] == "Kernel" and not d["comm"]):
            index = max(bisect.bisect_right(starts, d["start_ns"]) - 1, 0)
            filed[file.steps[index].number].append((d["start_ns"], d["end_ns"]))
        for number, kernels in filed.items():
            computing = sum(e - s for s, e in union(kernels))
            assert abs(rows[file.rank, number].computing_ns - computing) <= slack * len(kernels)


def test_both_forms_give_the_same_overlap_table(jobs):
    tables = [[(r.rank, r.step, r.computing_ns, r.communication_ns, r.free_ns)
               for r in overlap_report(jobs[form][0])] for form in ("chrome", "protobuf")]
    assert len(tables[0]) == 8
    for a, b in zip(*tables, strict=True):
        assert a[:2] == b[:2] and all(abs(x - y) <= 50_000 for x, y in zip(a[2:], b[2:], strict=True))


@pytest.mark.parametrize("form", ["chrome", "protobuf"])
def test_shuffled_and_cut_off_files_convert_with_what_they_hold(tmp_path, form):
    results = {}
    for name, options in (("ordered", {}), ("shuffled", {"shuffle": True}), ("cut", {"truncate": True})):
        generate_profile(tmp_path / name, form=form, steps=4, seed=3, gpu=True, **options)
        results[name] = convert(tmp_path / name, tmp_path / f"{name}.pftrace", kind="detail", max_bytes=None)
    assert results["shuffled"].slices == results["ordered"].slices > 0
    assert not results["shuffled"].warnings
    assert 0 < results["cut"].slices < results["ordered"].slices
    assert any("cut off" in w for w in results["cut"].warnings)


def test_a_protobuf_name_that_is_not_utf8_is_read_with_replacement_characters(tmp_path):
    """Protobuf hands a proto2 string that is not UTF-8 back as bytes: a damaged name (a host
    event's, a runtime call's) is read as the text files are, not an internal error, and its event kept."""
    generate_profile(tmp_path / "whole", form="protobuf", steps=2, seed=3, gpu=True)
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    [path] = (tmp_path / "whole").glob("*.pb")
    data = path.read_bytes()
    for name in (b"_DataLoaderIterSingleProcess", b"cudaSetDevice_v3020"):  # same length: framing holds
        assert name in data
        data = data.replace(name, name[:5] + b"\xff" + name[6:])
    (damaged / path.name).write_bytes(data)

    def names(root):
        return Counter(s.name for b in _batches(root) for s in b.slices)

    whole, read = names(tmp_path / "whole"), names(damaged)
    assert read["_Data\ufffdoaderIterSingleProcess"] == whole["_DataLoaderIterSingleProcess"] > 0
    assert read["cudaS\ufffdtDevice_v3020"] == whole["cudaSetDevice_v3020"] > 0
    assert sum(read.values()) == sum(whole.values())
