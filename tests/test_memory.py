"""Peak memory does not grow with the input: ten times the steps, the same peak (issue 3)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.run import measure
from fixtures.msprof_gen import write_msprof_profile


@pytest.fixture(scope="module")
def profiles(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    made = {}
    for layout in ("timeline", "cann8"):
        # The small profile's files already hold a few of the readers' 2 MiB batches, so
        # both runs are in their steady state: what differs is only how many steps follow.
        small, large = (tmp_path_factory.mktemp(f"{layout}{n}") for n in (30, 300))
        for root, steps in ((small, 30), (large, 300)):
            write_msprof_profile(root, ranks=2, graphs=(2,), steps=steps, tasks_per_step=300,
                                 layout=layout, seed=5)
        made[layout] = (small, large)
    return made


@pytest.mark.parametrize("layout", ["timeline", "cann8"])
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
