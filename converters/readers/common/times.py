"""Times as profilers write them, to the model's ns, exactly.

Shared by every reader of µs: Chrome traces (``chrome_trace``, and the dialects of ``kineto`` and
``paddle``), ``ascend_pt``'s CSV, ``host_info`` and ``mindspore1x``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from ...model import TIME_LIMIT_NS
from .._core import us_to_ns as _us_to_ns


def us_to_ns(us: Any) -> int:
    """µs as CANN writes them (a number) or torch_npu does (a string with 3 decimals), as ns.

    The string is parsed exactly: at epoch scale a float has a grain of ~0.25 µs. The forms
    profilers write are parsed in C (``readers/c/chrome_trace.c``), the rest by ``_exact_us_to_ns``.
    """
    return _us_to_ns(us, _exact_us_to_ns)


def _exact_us_to_ns(us: Any) -> int:
    if type(us) is not str:
        if -9e12 < us < 9e12:  # below 2**53 ns a float product is exact to the ns
            return round(us * 1000)
        whole = int(us)  # epoch µs as a float (host timelines): whole and fraction apart
        return _a_time(whole * 1000 + round((us - whole) * 1000), us)
    whole, _, fraction = us.partition(".")
    if whole.isdigit() and len(fraction) <= 3 and (not fraction or fraction.isdigit()):
        return _a_time(int(whole) * 1000 + int(fraction.ljust(3, "0")), us)
    value = Decimal(us)
    if value.is_finite() and value.adjusted() > 25:  # "1e100000": not made into a huge int
        raise ValueError(f"{us!r} µs is no time")
    return _a_time(int((value * 1000).to_integral_value()), us)


def _a_time(ns: int, us: Any) -> int:
    if -TIME_LIMIT_NS < ns < TIME_LIMIT_NS:  # model.checked_ns, saying what the file holds
        return ns
    raise ValueError(f"{us!r} µs is no time")
