"""Input formats. Each module exposes ``NAME``, ``sniff``, ``rank_info`` and ``read``.

``READERS`` lists them from the most to the least specific; discovery asks each in turn.
"""

from . import ascend_pt, msprof

READERS = (ascend_pt, msprof)

# What discovery looked for, for the "nothing recognisable" message.
LOOKED_FOR = (
    "ascend_pt: *_ascend_pt/ or *_ascend_ms/ with ASCEND_PROFILER_OUTPUT/trace_view.json; "
    "msprof: PROF_*/device_N/ with info.json.N and timeline/*.json or "
    "../mindstudio_profiler_output/msprof_*.json"
)
