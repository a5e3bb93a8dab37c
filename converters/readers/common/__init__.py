"""The readers' shared toolkit: what several formats read with and none owns (Perfetto's
``importers/common``). ``times`` (decimal µs text to ns exactly), ``flows`` (arrow ends bound to
slices, their ids), ``spill`` (records filed by step on disk), ``spilled_flows`` (a big Chrome
trace's records filed by step, its arrows bound as they are read back), ``seek`` (a big Chrome
trace's first pass from the text), ``events`` (the Chrome-trace event type, batches), ``jsonfile``
(batches, cut-off recovery, gzip), ``textfile`` (CSV with whole lines and field limits), ``sqlite``
(read-only databases, ``Schema``), ``lanes`` (a device stream's lane name), ``markers`` (the user's
``--step-marker`` ranges as steps). The formats are the modules beside this package.
"""
