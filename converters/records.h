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
#define READ_CONTEXT_DIALECT 13
#define READ_CONTEXT_HOST_TASKS 14
#define READ_CONTEXT_FIELDS 15

/* kineto.InC: the rules by which _core.read_events reads Kineto's device and launch events */
#define IN_C_CATS 0
#define IN_C_STREAM 1
#define IN_C_COMMUNICATES 2
#define IN_C_LEARN 3
#define IN_C_FIRSTS 4
#define IN_C_LASTS 5
#define IN_C_STEPS 6
#define IN_C_COLLECTIVES 7
#define IN_C_GRAPHS 8
#define IN_C_REPLAYED 9
#define IN_C_LAUNCHED 10
#define IN_C_FLOWS 11
#define IN_C_LAUNCHES 12
#define IN_C_STREAM_LANES 13
#define IN_C_STREAM_LANE 14
#define IN_C_FIELDS 15
/* kineto.InCCat: one of InC.cats */
#define IN_C_CAT_NAME 0
#define IN_C_CAT_LAUNCH 1
#define IN_C_CAT_KERNEL 2
#define IN_C_CAT_SHOWN 3
#define IN_C_CAT_PREFIX 4
#define IN_C_CAT_COMPUTES 5
#define IN_C_CAT_FIELDS 6

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

/* flows.Bound.arrows' items, (key, start, end): an arrow's key and the slices it joins, a plain tuple */
#define ARROW_KEY 0
#define ARROW_START 1
#define ARROW_END 2
#define ARROW_FIELDS 3

/* seek._NEEDLES' items, (text, at): a word _core.found_at looks for and where the two bytes it looks
 * for first lie in it, a plain pair */
#define NEEDLE_TEXT 0
#define NEEDLE_AT 1
#define NEEDLE_FIELDS 2

/* ascend_db_flows.BindRules: what _db_core.bind links, and the names a task queue's ops start with */
#define BIND_RULES_HOST 0
#define BIND_RULES_STREAM 1
#define BIND_RULES_COMM_TASK 2
#define BIND_RULES_COMM_OP 3
#define BIND_RULES_QUEUE 4
#define BIND_RULES_FIELDS 5

/* ascend_db_specs.TaskSpec: what _db_core.Rows.tasks makes a TASK row into, and where it reads the row */
#define TASK_SPEC_SLICE_TYPE 0
#define TASK_SPEC_LAYER 1
#define TASK_SPEC_NOT_COMPUTE 2
#define TASK_SPEC_KEYS 3
#define TASK_SPEC_PLACES 4
#define TASK_SPEC_FIELDS 5

/* ascend_db_specs.TaskPlaces: the places of the TASK query's columns Rows.tasks reads */
#define TASK_PLACES_OK 0
#define TASK_PLACES_KIND 1
#define TASK_PLACES_START 2
#define TASK_PLACES_DUR 3
#define TASK_PLACES_STREAM 4
#define TASK_PLACES_ARGS_AT 5
#define TASK_PLACES_TASK_ARGS_END 6
#define TASK_PLACES_ARGS_END 7
#define TASK_PLACES_TASK_TYPE 8
#define TASK_PLACES_NAME 9
#define TASK_PLACES_C_TYPE 10
#define TASK_PLACES_TYPE 11
#define TASK_PLACES_START_NS 12
#define TASK_PLACES_END_NS 13
#define TASK_PLACES_FIELDS 14

/* ascend_db_specs.CommSpec: what Rows.tasks makes an HCCL task's row into */
#define COMM_SPEC_LAYER 0
#define COMM_SPEC_KEYS 1
#define COMM_SPEC_PLACES 2
#define COMM_SPEC_ENUMS 3
#define COMM_SPEC_PLANES 4
#define COMM_SPEC_FIELDS 5

/* ascend_db_specs.CommEnums: an HCCL enum family's names by id, a dict each */
#define COMM_ENUMS_TRANSPORT_TYPE 0
#define COMM_ENUMS_DATA_TYPE 1
#define COMM_ENUMS_LINK_TYPE 2
#define COMM_ENUMS_RDMA_TYPE 3
#define COMM_ENUMS_FIELDS 4

/* ascend_db_specs.HostSpec: what _db_core.Rows.host makes a host API row into */
#define HOST_SPEC_SLICE_TYPE 0
#define HOST_SPEC_LAYER 1
#define HOST_SPEC_KEYS 2
#define HOST_SPEC_FIELDS 3

/* ascend_db_specs.FillHead: the items of a list _db_core.fill reads and moves on, one per scan */
#define FILL_HEAD_BATCHES 0
#define FILL_HEAD_BATCH 1
#define FILL_HEAD_POSITION 2
#define FILL_HEAD_FIELDS 3

/* xplane.DeviceInC: what _core.xdevice reads a GPU's stream lines with */
#define DEVICE_IN_C_RANK 0
#define DEVICE_IN_C_DETAIL 1
#define DEVICE_IN_C_NAMES 2
#define DEVICE_IN_C_SLICE_TYPE 3
#define DEVICE_IN_C_STREAM_LAYER 4
#define DEVICE_IN_C_COMM_LAYER 5
#define DEVICE_IN_C_COMM_LANE 6
#define DEVICE_IN_C_KERNEL 7
#define DEVICE_IN_C_NOT_COMPUTE 8
#define DEVICE_IN_C_COMPUTES 9
#define DEVICE_IN_C_COPIES 10
#define DEVICE_IN_C_COMMUNICATES 11
#define DEVICE_IN_C_LEARN 12
#define DEVICE_IN_C_LAUNCHED 13
#define DEVICE_IN_C_DUMPS 14
#define DEVICE_IN_C_FIELDS 15

/* xplane.HostInC: what _core.xhost reads a host plane's lines with */
#define HOST_IN_C_RANK 0
#define HOST_IN_C_DETAIL 1
#define HOST_IN_C_FIRST 2
#define HOST_IN_C_NAMES 3
#define HOST_IN_C_STAT_NAMES 4
#define HOST_IN_C_SLICE_TYPE 5
#define HOST_IN_C_HOST_LAYER 6
#define HOST_IN_C_LAUNCHED 7
#define HOST_IN_C_ELSEWHERE 8
#define HOST_IN_C_MARKER 9
#define HOST_IN_C_ID_LIMIT 10
#define HOST_IN_C_DUMPS 11
#define HOST_IN_C_FIELDS 12

#endif
