"""Peak memory does not grow with the input: ten times the steps, the same peak (issue 3)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.run import measure
from fixtures.ascend_db_gen import write_ascend_db
from fixtures.ascend_pt_gen import write_ascend_pt_profile
from fixtures.host_info_gen import write_host_info
from fixtures.kineto_gen import write_kineto_traces
from fixtures.mindspore1x_gen import write_mindspore1x_profile
from fixtures.msprof_gen import write_msprof_profile
from fixtures.paddle_gen import generate_profile as write_paddle_profile

LAYOUTS = ["timeline", "cann8", "trace_view", "mindspore1x", "host_info", "database", "kineto", "paddle_json",
           "paddle_pb"]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    made = {}
    for layout in ("timeline", "cann8"):  # msprof; the other two below
        # The small profile's files already hold a few of the readers' 2 MiB batches, so
        # both runs are in their steady state: what differs is only how many steps follow.
        small, large = (tmp_path_factory.mktemp(f"{layout}{n}") for n in (30, 300))
        for root, steps in ((small, 30), (large, 300)):
            write_msprof_profile(root, ranks=2, graphs=(2,), steps=steps, tasks_per_step=300,
                                 layout=layout, seed=5)
        made[layout] = (small, large)
    small, large = (tmp_path_factory.mktemp(f"mindspore1x{n}") for n in (30, 300))
    for root, steps in ((small, 30), (large, 300)):
        write_mindspore1x_profile(root, ranks=2, steps=steps, ops_per_step=1000, comm_ops=2, planes=2, seed=5)
    made["mindspore1x"] = (small, large)
    small, large = (tmp_path_factory.mktemp(f"host_info{n}") for n in (30, 300))
    for root, steps in ((small, 30), (large, 300)):  # host stages of 2 ranks beside a small device profile
        write_msprof_profile(root, ranks=2, graphs=(2,), steps=3, tasks_per_step=20, seed=5)
        for rank in (0, 1):
            write_host_info(root, rank=rank, steps=steps * 20, step_ns=10_000_000, seed=5, truth=False)
    made["host_info"] = (small, large)
    small, large = (tmp_path_factory.mktemp(f"database{n}") for n in (30, 300))
    for root, steps in ((small, 30), (large, 300)):  # torch_npu's database form, 2 ranks
        for rank in (0, 1):
            folder = root / f"rank{rank}_ascend_pt"
            write_ascend_db(folder / "ASCEND_PROFILER_OUTPUT", rank=rank, steps=steps, tasks_per_step=600,
                            planes=4, seed=5)
            (folder / f"profiler_info_{rank}.json").write_text(f'{{"rank_id": {rank}}}')
    made["database"] = (small, large)
    small, large = (tmp_path_factory.mktemp(f"trace_view{n}") for n in (20, 200))
    for root, steps in ((small, 20), (large, 200)):  # torch_npu's trace_view.json, names last
        write_ascend_pt_profile(root, ranks=2, steps=steps, tasks_per_step=300, with_kernel_details=False,
                                metadata_last=True, seed=5)
    made["trace_view"] = (small, large)
    small, large = (tmp_path_factory.mktemp(f"kineto{n}") for n in (1, 10))
    for root, mb in ((small, 6), (large, 60)):  # PyTorch GPU traces, gzipped, names last, out of order
        write_kineto_traces(root, ranks=2, steps=1, target_mb=mb, gzip=True, metadata_last=True, shuffle=True,
                            seed=5)
    made["kineto"] = (small, large)
    for form, name in (("chrome", "paddle_json"), ("protobuf", "paddle_pb")):
        small, large = (tmp_path_factory.mktemp(f"{name}{n}") for n in (1, 10))
        for root, mb in ((small, 4), (large, 40)):
            write_paddle_profile(root, form=form, steps=2, target_mb=mb, gpu=True, ranks=2, seed=5)
        made[name] = (small, large)
    return made


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["summary", "detail"])
def test_peak_rss_is_flat_as_the_input_grows(profiles, tmp_path, layout, kind):
    def peak(root: Path) -> float:
        out = tmp_path / "out.pftrace"
        argv = [sys.executable, "-m", "converters", str(root), "--kind", kind, "--max-size", "0",
                "-o", str(out)]
        return measure(f"{layout} {kind}", argv, out).peak_rss_mib

    small_root, large_root = profiles[layout]
    small = max(peak(small_root), peak(small_root))  # a short run: sampling may miss its peak once
    large = peak(large_root)
    assert large <= small * 1.2, f"peak RSS grew from {small:.0f} to {large:.0f} MiB with 10x the steps"
    assert large < 300
