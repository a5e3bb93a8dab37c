"""Shared fixtures: the real samples (through TRACE2PERFETTO_REALDATA) and generated profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def real_data(name: str) -> Path:
    """A folder of ../shared/data/real, or skip the test with the reason."""
    root = os.environ.get("TRACE2PERFETTO_REALDATA")
    if not root:
        pytest.skip("TRACE2PERFETTO_REALDATA is not set (point it at shared/data/real)")
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
