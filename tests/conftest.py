"""Shared fixtures: the real samples (through TRACE2PERFETTO_REALDATA) and generated profiles;
and the two tiers of the suite.

``make test`` runs everything. ``make check`` is the quick tier: ``pytest -m "not slow"`` with
the ``check`` hypothesis profile (HYPOTHESIS_PROFILE=check). A test is slow when its file is in
SLOW_FILES or its name in SLOW_TESTS; everything else, including every test added later, is in
the quick tier. There a property test runs at most CHECK_CAP examples, or its CHECK_EXAMPLES
count (its own count in ``make test``), and the real samples are one per format (CHECK_SAMPLES).
A test is listed slow for what it costs (seconds of CPU), never moved: the files stay where they
are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# ``full`` is hypothesis' defaults, as every test ran before the tiers; each test's own
# @settings(max_examples=...) holds there. ``check`` caps that count (see _cap_examples).
settings.register_profile("full")
CHECK_CAP = 10
settings.register_profile("check", max_examples=CHECK_CAP)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "full")
settings.load_profile(PROFILE)

# Property tests with a count of their own in the quick tier, and why: more for C routines held to
# their Python rule over inputs whose corners are many, where an example costs a millisecond; fewer
# where each example is a generated job run end to end (seconds of CPU for ten).
CHECK_EXAMPLES = {
    "test_us_to_ns_is_exact_for_every_form": (200, "the C decimal parser: every spelling of a µs time"),
    "test_a_scanned_batch_holds_what_msgspec_decodes_and_never_takes_what_it_rejects":
        (30, "the C scanner against msgspec: broken batches are most of its inputs"),
    "test_raw_args_are_encoded_as_their_decoded_dict_is": (30, "the C args walk against the dict encoder"),
    "test_the_json_and_the_pftrace_hold_the_same_slices_and_arrows": (3, "a job through both writers"),
    "test_no_straggler_share_passes_100_percent": (3, "a generated job's report"),
    "test_cap_is_never_exceeded_and_keeps_whole_steps_summary_first": (5, "a detail conversion per cap"),
}

# Files outside the quick tier, and why.
SLOW_FILES = {
    "test_large_files.py": "250-300 MB profiles, by design",
    "test_report_browser.py": "drives chromium",
    "test_fuzz_sample.py": "a sample of the mutation corpus through every command",
    "test_memory.py": "peak RSS as the input grows: profiles of up to 300 steps, each command in a process",
    "test_cluster.py": "a Dask LocalCluster, and 4,096 ranks in a driver of its own",
    "test_conservation.py": "21 generated profiles through the whole pipeline, every record counted",
    "test_trace_processor.py": "Perfetto's trace processor loading every trace of every sample",
    "test_critical_hta.py": "HTA's own critical path of two real ranks, built before the first test",
}
# Tests (by function name, any parameter) outside the quick tier, and why.
SLOW_TESTS: dict[str, str] = {
    "test_64_ranks_by_100_steps_stay_under_2_mb": "a report of 6,400 rank-steps",
    "test_gigabytes_of_padding_end_in_bounded_memory": "gigabytes of whitespace through each command",
    "test_an_event_with_a_field_of_the_wrong_type_is_left_out_with_a_warning":
        "every wrong type of every field in each real sample (the quick tier has the hypothesis one)",
    "test_the_comparison_holds_every_slice_of_both_runs_and_loads_whole":
        "every pair of real samples, both writers",
    "test_real_every_dispatch_lands_once_and_ops_by_name_counts_them":
        "rocprof-908's 43,915 dispatches read in detail and by ops (the quick tier keeps its other tests)",
    "test_real_rccl_is_a_collective_and_overlap_computes": "rocprof-908 through comm and overlap",
    "test_real_rocprof_s_one_long_step_has_its_path": "rocprof-908's one long step through critical",
    "test_every_real_sample_makes_a_report":
        "a report of each real sample (the other report tests read one per format)",
    "test_the_gpu_profilers_real_samples_mutated_convert_with_a_warning_or_fail_cleanly":
        "each mutation of each GPU sample through every command (test_fuzz_sample's kind; the quick tier "
        "has the hypothesis one)",
    "test_arrow_warnings_only_from_commands_that_draw_arrows":
        "every command on a level-0 and a level-1 copy",
    "test_the_pipeline_lanes_load_with_their_arrows": "the trace processor loading each made pipeline sample",
    "test_info_estimates_each_output_formats_size_within_a_quarter": "each sample converted to every format",
    "test_memory_does_not_grow_with_steps": "peak RSS as a generated profile grows, as in test_memory.py",
    "test_size_near_target_and_fast": "a 47 MB generated Kineto trace",
    "test_names_last_shuffled_and_gzipped_draws_exactly_what_the_ordered_file_draws":
        "one generated trace read in three orders and forms",
}

# One real sample per format in the quick tier (a folder, or the folder its path starts with).
CHECK_SAMPLES = {"msprof-2rank", "msprof-db", "ascend-pt-2rank", "ascend-pt-db", "kineto-2rank",
                 "mindspore-1x", "mindspore-cpu", "mindspore-2.0-cpu", "paddle-cpu-chrome",
                 "paddle-cpu-protobuf", "nsys-cloverleaf", "xplane-jax-conv", "rocprof-908"}


def slow_reason(item: pytest.Item) -> str | None:
    """Why a test is outside the quick tier, or None."""
    return SLOW_FILES.get(item.path.name) or SLOW_TESTS.get(getattr(item, "originalname", item.name))


def _cap_examples(item: pytest.Item) -> None:
    """In the check profile, a property test's own max_examples capped at its CHECK_EXAMPLES
    count (else CHECK_CAP). A test's @settings overrides any profile, so the cap is set on the
    settings hypothesis reads when the test runs (the attribute its own pytest plugin reads)."""
    test = getattr(item, "obj", None)
    own = getattr(test, "_hypothesis_internal_use_settings", None)
    if own is None:
        return
    cap = CHECK_EXAMPLES.get(getattr(item, "originalname", item.name), (CHECK_CAP, ""))[0]
    if own.max_examples > cap:
        test._hypothesis_internal_use_settings = settings(own, max_examples=cap)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: outside the quick tier (make check); make test runs it")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if slow_reason(item):
            item.add_marker(pytest.mark.slow)
        if PROFILE == "check":
            _cap_examples(item)


def real_data(name: str) -> Path:
    """A folder of ../shared/data/real, or skip the test with the reason."""
    root = os.environ.get("TRACE2PERFETTO_REALDATA")
    if not root:
        pytest.skip("TRACE2PERFETTO_REALDATA is not set (point it at shared/data/real)")
    if PROFILE == "check" and name.split("/")[0] not in CHECK_SAMPLES:
        pytest.skip(f"{name}: the quick tier reads one real sample per format (make test reads all)")
    path = Path(root) / name
    if not path.is_dir():
        pytest.skip(f"{path} does not exist")
    return path


@pytest.fixture
def msprof_2rank() -> Path:
    return real_data("msprof-2rank")


@pytest.fixture
def out_dir(tmp_path_factory) -> Path:
    """A folder for a test's outputs apart from its profile: an output inside an input folder is
    refused (it would be read as part of the profile next time)."""
    return tmp_path_factory.mktemp("out")


LEVEL0_KERNEL_COLUMNS = ("Step Id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)",
                         "Wait Time(us)", "Block Dim")


def level0_copy(folder: Path) -> Path:
    """ascend-pt-2rank (profiler level 1) in ``folder``, as torch_npu writes the same job at profiler
    level 0 (as msinsight's level0 sample of this job family shows it): no HCCL plane events; no
    CANN layer (its process unnamed and without events, but the launches' HostToDevice flow starts
    still on its threads); kernel_details.csv with level 0's columns, Type N/A and Accelerator Core
    N/A but for HCCL ops; no communication.json, communication_matrix.json, op_statistic.csv or
    api_statistic.csv."""
    import csv
    import json
    import shutil

    root = folder / "level0"
    shutil.copytree(real_data("ascend-pt-2rank"), root)
    for output in root.glob("*/ASCEND_PROFILER_OUTPUT"):
        for name in ("communication.json", "communication_matrix.json", "op_statistic.csv",
                     "api_statistic.csv"):
            (output / name).unlink()
        trace = output / "trace_view.json"
        events = json.loads(trace.read_text())
        meta = [e for e in events if e.get("ph") == "M"]
        cann = {e["pid"] for e in meta if e.get("name") == "process_name" and e["args"]["name"] == "CANN"}
        threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e.get("name") == "thread_name"}
        trace.write_text(json.dumps([
            e for e in events
            if not threads.get((e.get("pid"), e.get("tid")), "").startswith("Plane ")
            and (e.get("pid") not in cann or e.get("ph") in ("s", "f")
                 or (e.get("ph") == "M" and e.get("name") != "process_name"))]))
        kernels = output / "kernel_details.csv"
        with open(kernels, newline="") as f:
            rows = list(csv.DictReader(f))
        with open(kernels, "w", newline="") as f:
            writer = csv.DictWriter(f, LEVEL0_KERNEL_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows({**row, "Type": "N/A", "Accelerator Core": "HCCL" if row["Accelerator Core"]
                              in ("HCCL", "COMMUNICATION") else "N/A"} for row in rows)
    return root
