"""``fixtures.rocprof_gen`` against the real rocprofv3 sample (rocprof-908): the same layout (the
tool object's keys in the real order, the records' keys, the kinds' numbers), so what the reader's
tests prove on generated files holds of the real one."""

from __future__ import annotations

import gzip
import json

from conftest import real_data

from fixtures.rocprof_gen import write_rocprof


def _keys_in_order(keys, within) -> bool:
    return [k for k in within if k in keys] == list(keys)


def test_the_generated_layout_is_the_real_ones(tmp_path):
    real = json.loads(gzip.decompress((real_data("rocprof-908") / "908_results.json.gz").read_bytes()))
    [real] = real["rocprofiler-sdk-tool"]
    [made] = write_rocprof(tmp_path, steps=2).files
    tool = made.tool
    assert set(tool) <= set(real) and _keys_in_order(list(tool), list(real)), "the names before the records"
    assert set(tool["buffer_records"]) <= set(real["buffer_records"])
    kinds = real["strings"]["buffer_records"]
    for number, kind in enumerate(tool["strings"]["buffer_records"]):
        if not kind["kind"].startswith("K") or kind["kind"] == "KERNEL_DISPATCH":
            assert kinds[number]["kind"] == kind["kind"]
            named = {i: op for i, op in enumerate(kind["operations"]) if not op[3:].isdigit()}
            assert {i: kinds[number]["operations"][i] for i in named} == named, "names at their numbers"
    mine, theirs = tool["buffer_records"]["kernel_dispatch"][0], real["buffer_records"]["kernel_dispatch"][0]
    assert set(mine) <= set(theirs) and set(mine["dispatch_info"]) <= set(theirs["dispatch_info"])
    assert {r["kind"] for r in real["buffer_records"]["kernel_dispatch"]} == {mine["kind"]}
    symbol = real["kernel_symbols"][1]
    assert set(tool["kernel_symbols"][0]) <= set(symbol)
    gpu = next(a for a in real["agents"] if a["type"] == 2)
    assert set(tool["agents"][1]) <= set(gpu) and gpu["gpu_index"] == 0
    assert set(tool["metadata"]) <= set(real["metadata"]) and "hostname" in real["metadata"]["node"]
