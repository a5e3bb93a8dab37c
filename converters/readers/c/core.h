/* What the C files of converters.readers._core share, private to them (MANIFEST.in takes it into a
 * source distribution). One extension module, one .c file per Python module it speeds up:
 * - _core.c: the module, its interned strings and the NamedTuple maker every part uses;
 * - events.c: events.batches' scan (RawEvents), a batch of events read as JSON text, not decoded, and
 *   kineto._memory's [memory] events picked from it (memory_events);
 * - chrome_trace.c: chrome_trace.Records.read_batches' common events to records (read_events),
 *   Kineto's device work and launches among them (kineto.InC), and its first pass (steps_and_names);
 * - values.c: an event's times in ns (times.us_to_ns) and the args read_events reads from their
 *   raw text (torch_npu's Task Type, Kineto's correlation), with no decoding;
 * - survey.c: launches.Survey.add over a scanned batch (Kineto's first pass: its launches);
 * - spill.c: spill.StepSpill's rows and packing, spilled_flows' filing by step, and the packing of
 *   the records read_events makes in the spill pass;
 * - flows.c: flows.bind_ends, flows.Linker._arrow, flows.flow_id;
 * - seek.c: seek's search for a few words in a chunk of a file;
 * - paddle.c: paddle.Paddle's names and times (normalise);
 * - xplane.c: xplane._batches' decoding of a line's events (xevents), and a GPU's stream lines and a host
 *   plane's lines made into records (xdevice, xhost) by xplane._device_work's and _host_work's rules.
 * What a file takes from another is declared here, in three parts: the module's, the scanned batch
 * (events.c makes it, chrome_trace.c reads it) and the made records (chrome_trace.c makes them,
 * spill.c packs them). Each Python rule a routine copies, and the test holding the C to it:
 * docs/architecture.md, "The C and the Python it copies". */
#ifndef TRACE2PERFETTO_READERS_CORE_H
#define TRACE2PERFETTO_READERS_CORE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../../_buffer.h"
#include "../../records.h"

/* Seen by the other files of the module, not outside it: only PyInit__core is exported */
#define CORE_PRIVATE __attribute__((visibility("hidden")))

/* -- the module (_core.c) ------------------------------------------------------------------------ */

/* Interned at import: an event's field names, the phases, the layers and step names the rules name */
extern CORE_PRIVATE PyObject *S_ph, *S_name, *S_pid, *S_tid, *S_ts, *S_dur, *S_cat, *S_id, *S_args;
extern CORE_PRIVATE PyObject *S_M, *S_X, *S_C, *S_s, *S_f, *S_t, *S_HOST, *S_STREAM, *S_STEP_PREFIX;
extern CORE_PRIVATE PyObject *S_ITERATION, *S_REDUCE, *S_PROFILE_STEP, *EMPTY, *EMPTY_TUPLE;

/* A NamedTuple of ``n`` fields from ``items`` (new references, stolen even on failure) */
CORE_PRIVATE PyObject *record(PyObject *type, PyObject **items, Py_ssize_t n);

/* Each file's functions, which PyInit__core adds to the module */
extern CORE_PRIVATE PyMethodDef EVENTS_METHODS[], CHROME_TRACE_METHODS[], SPILL_METHODS[], FLOWS_METHODS[],
    SEEK_METHODS[], SURVEY_METHODS[], PADDLE_METHODS[], XPLANE_METHODS[];
CORE_PRIVATE int events_ready(PyObject *module);  /* RawEvents added: 0, or -1 on error */
CORE_PRIVATE int xplane_ready(PyObject *module);  /* Launches added: 0, or -1 on error */
CORE_PRIVATE int seek_ready(PyObject *module);    /* WIDE_SEARCH added: 0, or -1 on error */
/* flows.flow_id's digest of an arrow's text (flows.c): xplane.c names its launches' arrows with it */
CORE_PRIVATE uint64_t blake2b_64(const uint8_t *data, size_t len);

/* -- the scanned batch: events.c makes it, chrome_trace.c reads it ------------------------------- */

enum { F_PH, F_NAME, F_PID, F_TID, F_TS, F_DUR, F_CAT, F_ID, F_ARGS, N_FIELDS };  /* an Event's fields */
enum { K_ABSENT, K_STR, K_STR_ESC, K_INT, K_NUM, K_NULL, K_OTHER };  /* OTHER: true, false, {}, [] */
typedef struct { uint32_t at, len; uint8_t kind; } Span;  /* a value's whole text in the batch */
typedef struct { uint32_t at, len; Span f[N_FIELDS]; } RawEvent;
typedef struct {
    PyObject_HEAD
    PyObject *data;  /* the batch's bytes */
    PyObject *decode_event, *decode_value;  /* msgspec's: an Event, any value */
    PyObject *decode_time;  /* ts' and dur's, or NULL: Kineto's float_hook=str (a float read by its text) */
    Py_ssize_t n, size;
    RawEvent *events;
} RawEvents;

static inline const char *span_text(const RawEvents *r, const Span *sp) {
    return PyBytes_AS_STRING(r->data) + sp->at;
}

/* An int of at most 18 digits: 1 and its value, or 0 */
static inline int small_int(const char *text, Py_ssize_t n, long long *value) {
    Py_ssize_t i = text[0] == '-';
    if (n - i < 1 || n - i > 18) return 0;
    long long v = 0;
    for (Py_ssize_t k = i; k < n; k++) v = v * 10 + (text[k] - '0');
    *value = i ? -v : v;
    return 1;
}

/* The batch ``events`` is, if scan made it, else NULL */
CORE_PRIVATE RawEvents *raw_batch(PyObject *events);
/* Event ``i`` as msgspec decodes it alone: the Event of the batch's decoding */
CORE_PRIVATE PyObject *raw_event(const RawEvents *r, Py_ssize_t i);
/* Field ``f``'s value as msgspec gives it: Event's default where absent, args as bytes (raw JSON) */
CORE_PRIVATE PyObject *span_value(const RawEvents *r, const Span *sp, int f);
/* A scanned time field (F_TS, F_DUR) in ns as the batch's decoding gives it to times.us_to_ns: 1 (and
 * *ns), 0 for the Python rules (values.c) */
CORE_PRIVATE int span_ns(const RawEvents *r, const Span *sp, int f, long long *ns);
/* The double a JSON number's text stands for, as msgspec reads it: 1, or 0 if it cannot tell */
CORE_PRIVATE int number_value(const char *text, Py_ssize_t n, double *value);

/* A counter's arguments: each key's text and, where the value is a number, the double it is */
#define COUNTER_ARGS 16
typedef struct { const unsigned char *key; Py_ssize_t key_len; int numeric; double value; } CounterArg;
/* The arguments of a counter's raw JSON args: how many, or -1 for Python's rules (events.c) */
CORE_PRIVATE int counter_args(const char *text, Py_ssize_t length, CounterArg *found);

/* -- an event's values from its text (values.c), for chrome_trace.c ------------------------------ */

/* ns from µs (times.us_to_ns): from a decimal text of at most 3 decimals, a double, an int of µs, an
 * object of these; *ok = 0 (and 0) for the Python rules */
CORE_PRIVATE long long text_ns(const char *text, Py_ssize_t n, int *ok);
CORE_PRIVATE long long double_ns(double value, int *ok);
CORE_PRIVATE long long int_ns(long long value, int *ok);
CORE_PRIVATE long long fast_ns(PyObject *us, int *ok);
CORE_PRIVATE PyObject *us_to_ns(PyObject *module, PyObject *const *argv, Py_ssize_t argc);
CORE_PRIVATE const char *past_space(const char *p, const char *end);  /* past JSON's white space */
/* the top-level "Task Type" of raw JSON args (its text, *n bytes), or NULL for the Python rules */
CORE_PRIVATE const char *task_type_in(const char *data, Py_ssize_t length, Py_ssize_t *n);
/* the top-level "correlation" of raw JSON args: 1 (*value), 2 for none, 0 for the Python rules */
CORE_PRIVATE int correlation_in(const char *p, Py_ssize_t length, long long *value);

/* -- the made records: chrome_trace.c makes them, spill.c packs them ----------------------------- */

enum { P_SLICE = 1, P_SAMPLE = 2, P_FLOW_END = 3 };  /* a record's tag: in Made, and packed (pack) */

/* A record read_events made, before it is a NamedTuple or packed (``pack_made``): a Slice, Sample or
 * FlowEnd by its tag, holding the str objects its tuple would hold (a str shared by records is
 * packed once: pk_str asks its references), times as C numbers, a scanned event's args as where
 * they lie in the batch's text; tag 0 for a record Python made (``record``). */
typedef struct {
    char tag, starts;  /* P_SLICE, P_SAMPLE, P_FLOW_END or 0; a FlowEnd's starts */
    PyObject *layer, *lane, *name, *task, *args, *record;  /* owned; name: a FlowEnd's key; args: an object's */
    const char *text;  /* a scanned event's raw args (args NULL), NULL for None */
    Py_ssize_t text_len;
    long long start, dur;
    double value;
} Made;

/* ``made`` (``n`` records, ``types``: Slice, Sample, FlowEnd) packed by step as pack_by_step packs
 * their NamedTuples (``by_step``: a spill.ByStep): pack_by_step's runs, None where one of them
 * cannot be packed, NULL on error (spill.c) */
CORE_PRIVATE PyObject *pack_made_by_step(const Made *made, Py_ssize_t n, PyObject *by_step, PyObject *const *types);

#endif
