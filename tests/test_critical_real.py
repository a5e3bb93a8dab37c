"""``critical`` on every real sample: it runs, each step's path tiles the step's span in time order
with real pieces on the kept ranks, and a profile without device work has no path (docs/analysis.md,
section 11). What each sample's path shows is checked where a sample says more: the allreduces of
``ascend-pt-2rank`` (tests/test_critical.py), HTA's paths on ``kineto-2rank``
(tests/test_critical_hta.py)."""

from __future__ import annotations

import pytest
from conftest import real_data

from converters import Diagnostics, profile, readers
from converters.analyses.critical import SEGMENT_KINDS, UNSPLIT, critical_report
from converters.analyses.report import report_data
from converters.cli import main
from converters.profile import Kind, Options, Profile, read_profile

WITH_DEVICE = {  # sample -> (steps, ranks the profile holds)
    "kineto-2rank": ([551, 552], {0, 1}),
    "kineto-1.8-resnet50": ([5, 6, 7, 8, 9, 10], {0}),
    "ascend-pt-2rank": ([50], {0, 1}),
    "ascend-pt-db": ([50], {0, 1}),
    "msprof-2rank": (list(range(1, 11)), {0, 1}),
    "msprof-db": ([None], {0}),
    "mindspore-1x/single-device": ([None, 1], {1}),
}
# CPU-only jobs (no device records): their host operators are the compute, so the path runs through
# them and the host's collectives (sample -> (steps, ranks))
HOST_WORK = {
    "kineto-gloo-2rank": ([2, 3, 4], {0, 1}),
    "pp-gpipe-2stage-dev": ([2, 3, 4], {0, 1}),
    "paddle-cpu-chrome": ([3, 4, 5, 6, 7], {0}),
    "paddle-cpu-protobuf": ([3, 4, 5, 6, 7], {0}),
}
# steps with communication but no device task recorded and nothing else to stand for it (rank 6
# holds its step trace and HCCL traces only): their path would show that work as idle
DEVICE_UNKNOWN = {"mindspore-1x/hccl-rank6": [1, 2]}
HOST_ONLY = ["mindspore-cpu/pynative-profile", "mindspore-cpu/graph-legacy-Profiler"]


@pytest.mark.parametrize("sample", sorted(WITH_DEVICE) + sorted(HOST_WORK))
def test_each_step_s_path_tiles_its_span_on_the_kept_ranks(sample):
    steps, ranks = WITH_DEVICE.get(sample) or HOST_WORK[sample]
    paths = list(critical_report(real_data(sample), diag=Diagnostics()))
    assert all(p.host_work == (sample in HOST_WORK) for p in paths)
    assert [p.step for p in paths] == steps
    for found in paths:
        assert found.path and found.step_ns > 0
        assert found.path[0].start_ns == found.start_ns
        assert found.path[-1].start_ns + found.path[-1].dur_ns == found.start_ns + found.step_ns
        for before, after in zip(found.path, found.path[1:], strict=False):
            assert before.start_ns + before.dur_ns == after.start_ns
        assert all(s.dur_ns > 0 and s.kind in SEGMENT_KINDS and s.rank in ranks for s in found.path)
        assert all(w.saved_ns > 0 for w in found.what_if)
        assert sum(s.dur_ns for s in found.path if s.kind in ("compute", "communication", UNSPLIT)) > 0


@pytest.mark.parametrize("sample", sorted(HOST_WORK))
def test_a_cpu_only_job_s_path_runs_through_its_host_operators_and_says_so(sample, capsys):
    """Before, kineto-gloo-2rank's steps had no path: its CPU ops are no device tasks."""
    paths = list(critical_report(real_data(sample), diag=Diagnostics()))
    assert all(any(s.kind == "compute" for s in p.path) and p.what_if for p in paths)
    assert main(["critical", str(real_data(sample))]) == 0
    err = capsys.readouterr().err
    assert "the critical path's compute is the host operators" in err and "GPU or NPU trace" in err


@pytest.mark.parametrize("sample", sorted(DEVICE_UNKNOWN))
def test_steps_whose_device_side_is_not_recorded_have_no_path(sample):
    paths = list(critical_report(real_data(sample), diag=Diagnostics()))
    assert [p.step for p in paths] == DEVICE_UNKNOWN[sample]
    assert all(p.unknown and p.path == [] and p.what_if == [] for p in paths)


@pytest.mark.parametrize("sample", HOST_ONLY)
def test_a_profile_without_device_work_has_no_path_and_says_so(sample, capsys):
    assert list(critical_report(real_data(sample), diag=Diagnostics())) == []
    assert main(["critical", str(real_data(sample))]) == 0
    assert "no device work in the kept ranks and steps" in capsys.readouterr().err


def test_ranks_on_clocks_of_their_own_are_not_joined_on_one_path(capsys):
    """mindspore-1x holds two unrelated MindSpore 1.x profiles, each in device ticks since its device
    started: one path over both made step 1 span 462,000 s of idle. Refused, with what to do; each
    rank alone has its path."""
    assert main(["critical", str(real_data("mindspore-1x")), "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "rank 6: times on a clock of its own" in captured.err and "--ranks" in captured.err
    assert "--align" not in captured.err  # which would fail the same way
    assert main(["critical", str(real_data("mindspore-1x")), "--ranks", "6", "--format", "json"]) == 0
    capsys.readouterr()
    # they share no collective: --align collectives cannot put rank 6 on rank 1's timeline either
    assert main(["critical", str(real_data("mindspore-1x")), "--align", "collectives"]) == 2
    assert "rank 6: times on a clock of its own" in capsys.readouterr().err


WITH_MEMORY = ["ascend-pt-2rank", "kineto-1.8-resnet50"]  # samples whose readers give memory records


@pytest.mark.parametrize("sample", WITH_MEMORY)
def test_the_paths_and_the_report_s_detail_read_file_no_memory_records(sample, monkeypatch):
    """Neither a critical path nor the links use a memory record: their detail reads file none into
    the steps (``Options.memory``). Before, each filed them all (kineto-1.8-resnet50: its trace
    decoded once more, 0.15 CPU s of the report's 1.2; issue 44)."""
    def filed(*args):
        raise AssertionError("a critical path's read filed the memory records into the steps")

    monkeypatch.setattr(profile, "with_memory", filed)
    assert list(critical_report(real_data(sample), diag=Diagnostics()))
    assert report_data(real_data(sample), diag=Diagnostics()).critical


@pytest.mark.parametrize("sample", WITH_MEMORY)
def test_a_detail_read_without_memory_is_the_read_with_it_less_its_memory_records(sample):
    """Each step holds what it held, less the records the rank's memory reader gives (``readers.memory``:
    counters, allocations, module memory), with the same intervals; the steps of memory records only
    (outside every step) are gone."""
    opened = Profile.open(real_data(sample), Options(kind=Kind.DETAIL), diag=Diagnostics())
    memory = {repr(r) for info in opened.ranks for r in readers.memory(info, Diagnostics())}

    def steps(with_memory: bool) -> list[tuple]:
        found = []
        for batch in read_profile(opened.ranks, Options(kind=Kind.DETAIL, memory=with_memory), Diagnostics()):
            kept = [repr(r) for r in batch.slices + batch.samples if repr(r) not in memory]
            if kept or batch.step is not None:
                found.append((batch.rank, batch.key, batch.step, kept, batch.intervals))
        return found

    bare = steps(with_memory=False)
    assert bare == steps(with_memory=True)
    assert memory and sum(len(step[3]) for step in bare) > 1000
