"""Input formats. Each module exposes ``NAME``, ``sniff``, ``rank_infos`` and ``read``.

``READERS`` lists them from the most to the least specific; discovery asks each in turn. A
reader with ``ATTACHES`` (host_info) adds to the device ranks of the same id rather than
competing with them. A reader with ``FILES`` (kineto, paddle) reads files of a folder, one rank each,
and the folder's subfolders are still walked (a mixed folder: Ascend ranks beside GPU traces).
"""

from . import ascend_pt, host_info, kineto, mindspore1x, msprof, paddle

READERS = (ascend_pt, msprof, mindspore1x, host_info, kineto, paddle)

# What discovery looked for, for the "nothing recognisable" message.
LOOKED_FOR = (
    "ascend_pt: *_ascend_pt/ or *_ascend_ms/ with ASCEND_PROFILER_OUTPUT/trace_view.json; "
    "msprof: PROF_*/device_N/ with info.json.N and timeline/*.json or "
    "../mindstudio_profiler_output/msprof_*.json, or msprof_*.db; "
    "mindspore1x: a profiler/ folder with output_timeline_data_N.txt or hccl_info/*/iterN.trace; "
    "host_info: host_info/ with host_info_N.csv or timeline_N.json; "
    "kineto: PyTorch profiler traces *.pt.trace.json, or *.json[.gz] with Kineto's header; "
    "paddle: Paddle profiler files *.paddle_trace.json or *.paddle_trace.pb"
)
