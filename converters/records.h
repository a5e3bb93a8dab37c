/* The positions of the fields of the tuples the C modules read or make: the model's NamedTuples
 * and the few other tuples Python hands to C. A NamedTuple is a tuple, and C reads it by index
 * (PyTuple_GET_ITEM: no attribute lookup in the hot loops), so its field order is an interface:
 * each record here is named <TYPE>_<FIELD> after its Python class and field, <TYPE>_FIELDS is its
 * length. tests/test_records_abi.py pins every constant against the class's ``_fields``: a field
 * added or moved in Python without this header fails that test.
 * Included by the .c files; MANIFEST.in takes it into a source distribution. */
#ifndef TRACE2PERFETTO_RECORDS_H
#define TRACE2PERFETTO_RECORDS_H

/* model.TIME_LIMIT_NS: a time the model holds lies strictly within ±this (tests/test_records_abi.py) */
#define TIME_LIMIT_NS (1LL << 62)

/* model.Slice: one interval on one lane of one rank */
#define SLICE_RANK 0
#define SLICE_LAYER 1
#define SLICE_LANE 2
#define SLICE_NAME 3
#define SLICE_START_NS 4
#define SLICE_DUR_NS 5
#define SLICE_ARGS 6
#define SLICE_TASK_TYPE 7
#define SLICE_FLOWS_OUT 8
#define SLICE_FLOWS_IN 9
#define SLICE_FIELDS 10

/* model.Sample: one value of a counter */
#define SAMPLE_RANK 0
#define SAMPLE_LANE 1
#define SAMPLE_START_NS 2
#define SAMPLE_VALUE 3
#define SAMPLE_FIELDS 4

/* model.FlowEnd: one end of a flow arrow as a reader finds it */
#define FLOW_END_RANK 0
#define FLOW_END_LAYER 1
#define FLOW_END_LANE 2
#define FLOW_END_START_NS 3
#define FLOW_END_KEY 4
#define FLOW_END_STARTS 5
#define FLOW_END_FIELDS 6

/* layout.Track: one drawn lane */
#define TRACK_RANK 0
#define TRACK_GROUP 1
#define TRACK_GROUP_ORDER 2
#define TRACK_LANE 3
#define TRACK_LANE_ORDER 4
#define TRACK_COUNTER 5
#define TRACK_FIELDS 6

/* layout.Begin, layout.End, layout.Value: the layout's events, each on a track */
#define BEGIN_TRACK 0
#define BEGIN_SLICE 1
#define BEGIN_FIELDS 2

#define END_TRACK 0
#define END_TS_NS 1
#define END_FIELDS 2

#define VALUE_TRACK 0
#define VALUE_TS_NS 1
#define VALUE_VALUE 2
#define VALUE_FIELDS 3

/* layout.Placement: a chunk's events, compact (three int64 per event in codes), then its values */
#define PLACEMENT_TRACKS 0
#define PLACEMENT_SLICES 1
#define PLACEMENT_CODES 2
#define PLACEMENT_VALUES 3
#define PLACEMENT_FIELDS 4

/* overlap.Interval: a half-open (start_ns, end_ns) pair, a plain tuple */
#define INTERVAL_START 0
#define INTERVAL_END 1
#define INTERVAL_FIELDS 2

/* overlap.StepIntervals: what _overlap.step_intervals gives, as a plain tuple */
#define STEP_INTERVALS_COMPUTE 0
#define STEP_INTERVALS_OPS 1
#define STEP_INTERVALS_TASKS 2
#define STEP_INTERVALS_OPS_SEEN 3
#define STEP_INTERVALS_FIELDS 4

/* chrome_trace.Route: where the events of a (pid, tid) go, the values of Records._routes */
#define ROUTE_KIND 0
#define ROUTE_LANE 1
#define ROUTE_FIELDS 2

/* chrome_trace.ReadContext: the reader's state and rules that _core.read_events takes */
#define READ_CONTEXT_ROUTES 0
#define READ_CONTEXT_RANK 1
#define READ_CONTEXT_OFFSET_NS 2
#define READ_CONTEXT_DETAIL 3
#define READ_CONTEXT_UNREAD 4
#define READ_CONTEXT_REASONS 5
#define READ_CONTEXT_IS_COMPUTE 6
#define READ_CONTEXT_LAYER_TYPE 7
#define READ_CONTEXT_SLICE_TYPE 8
#define READ_CONTEXT_FLOW_END_TYPE 9
#define READ_CONTEXT_PYTHON_CATS 10
#define READ_CONTEXT_PROCESSES 11
#define READ_CONTEXT_SAMPLE_TYPE 12
#define READ_CONTEXT_FIELDS 13

/* spill.ByStep: what _core.read_events packs a batch's records by, as pack_by_step does */
#define BY_STEP_STARTS 0
#define BY_STEP_ORDERS 1
#define BY_STEP_FIELDS 2

/* chrome_trace.LeftOut: why _core.read_events leaves events out (ReadContext.reasons) */
#define LEFT_OUT_HOST 0
#define LEFT_OUT_TASKS 1
#define LEFT_OUT_COUNTERS 2
#define LEFT_OUT_FLOWS 3
#define LEFT_OUT_VENDOR 4
#define LEFT_OUT_FIELDS 5

#endif
