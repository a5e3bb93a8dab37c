/* The readers' per-event work in C, each beside the Python rules it follows:
 * - events.batches: a batch of events scanned, not decoded (scan, RawEvents);
 * - chrome_trace.Records.read_batches: the common events of a batch to records (read_events), or,
 *   in the spill pass, packed under their steps as they are read (read_events' by_step: pack_made),
 *   the first pass's names and possible steps (steps_and_names);
 *   chrome_trace.step_records: records by kind (by_kind);
 * - times.us_to_ns: µs to ns (us_to_ns);
 * - flows.bind_ends: which slice and start each flow end binds to (enclosing, bind_ends);
 *   flows.Linker._arrow (arrow), flows.flow_id (flow_id);
 * - spilled_flows.file_by_step: records under their steps (by_step), packed in the same pass
 *   (pack_by_step: spill.StepSpill.add_by_step);
 * - spill.StepSpill: records to plain rows and back (rows, records), packed and back (pack, unpack).
 *
 * A reader of a big file files every record it makes under its step on disk and reads it back
 * when the step is written: two conversions per record, about 2 us each in Python, a fifth of a
 * detail conversion. A row is a plain tuple that marshal can write: the record's kind first
 * (its layer's order for a Slice, -1 for a Sample, -2 for a FlowEnd), the rank left out (the
 * reader knows it), raw JSON args as bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "../_buffer.h"
#include "../records.h"

#define SAMPLE (-1)
#define FLOW_END (-2)

/* Every record holds its rank first and, but a Sample, its layer next: a row leaves the rank out
 * and gives the layer as its order (a Slice's as the row's kind) */
#define RECORD_RANK 0
#define RECORD_LAYER 1
_Static_assert(SLICE_RANK == RECORD_RANK && SAMPLE_RANK == RECORD_RANK && FLOW_END_RANK == RECORD_RANK &&
               SLICE_LAYER == RECORD_LAYER && FLOW_END_LAYER == RECORD_LAYER && SLICE_LANE == RECORD_LAYER + 1 &&
               SAMPLE_LANE == RECORD_RANK + 1, "a record starts (rank, layer) or, a Sample, (rank)");

static PyObject *layer_order(PyObject *orders, PyObject *layer) {
    PyObject *order = PyDict_GetItemWithError(orders, layer);
    if (!order && !PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "no layer %R", layer);
    return order;  /* borrowed */
}

/* A row: its kind, then the record's fields from the one after its rank and layer (a FlowEnd's:
 * from its layer, as its order) */
enum { ROW_KIND, ROW_FIRST_FIELD };

/* (kind, fields[from:]...), with field ``args_at`` as bytes if it is neither None nor a dict */
static PyObject *row_of(PyObject *kind, PyObject *r, Py_ssize_t from, Py_ssize_t args_at) {
    Py_ssize_t n = PyTuple_GET_SIZE(r);
    PyObject *row = PyTuple_New(ROW_FIRST_FIELD + n - from);
    if (!row) return NULL;
    Py_INCREF(kind);
    PyTuple_SET_ITEM(row, ROW_KIND, kind);
    for (Py_ssize_t i = from; i < n; i++) {
        PyObject *value = PyTuple_GET_ITEM(r, i);
        if (i == args_at && value != Py_None && !PyDict_CheckExact(value) && !PyBytes_CheckExact(value)) {
            value = PyObject_Bytes(value);  /* msgspec.Raw: pickled or marshalled only as bytes */
            if (!value) { Py_DECREF(row); return NULL; }
        } else {
            Py_INCREF(value);
        }
        PyTuple_SET_ITEM(row, ROW_FIRST_FIELD + i - from, value);
    }
    return row;
}

static PyObject *rows(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 5) {
        PyErr_SetString(PyExc_TypeError, "rows(records, orders, Slice, Sample, FlowEnd)");
        return NULL;
    }
    PyObject *records = PySequence_Fast(argv[0], "records must be a sequence"), *orders = argv[1];
    if (!records) return NULL;
    PyObject *sample = PyLong_FromLong(SAMPLE), *flow_end = PyLong_FromLong(FLOW_END);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(records);
    PyObject *out = (sample && flow_end) ? PyList_New(n) : NULL;
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *r = PySequence_Fast_GET_ITEM(records, i), *row = NULL, *order;
        PyTypeObject *type = Py_TYPE(r);
        if (type == (PyTypeObject *)argv[2] && PyTuple_GET_SIZE(r) == SLICE_FIELDS) {
            if ((order = layer_order(orders, PyTuple_GET_ITEM(r, SLICE_LAYER))))
                row = row_of(order, r, SLICE_LANE, SLICE_ARGS);
        } else if (type == (PyTypeObject *)argv[3] && PyTuple_GET_SIZE(r) == SAMPLE_FIELDS) {
            row = row_of(sample, r, SAMPLE_LANE, -1);
        } else if (type == (PyTypeObject *)argv[4] && PyTuple_GET_SIZE(r) == FLOW_END_FIELDS) {
            if ((order = layer_order(orders, PyTuple_GET_ITEM(r, FLOW_END_LAYER)))) {
                row = row_of(flow_end, r, FLOW_END_LAYER, -1);
                if (row) {  /* the layer, after the kind, as its order */
                    Py_INCREF(order);
                    Py_SETREF(PyTuple_GET_ITEM(row, ROW_FIRST_FIELD), order);
                }
            }
        } else {
            PyErr_Format(PyExc_TypeError, "not a record: %R", r);
        }
        if (!row) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, row);
    }
    Py_XDECREF(sample); Py_XDECREF(flow_end);
    Py_DECREF(records);
    return out;
}

/* type(rank, layer?, *row[skip:]) for a tuple subclass, made as its tp_new would but without
 * the NamedTuple's Python __new__ */
static PyObject *record_of(PyObject *type, PyObject *rank, PyObject *layer, PyObject *row, Py_ssize_t skip) {
    Py_ssize_t n = PyTuple_GET_SIZE(row), head = layer ? RECORD_LAYER + 1 : RECORD_RANK + 1;
    PyObject *record = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, head + n - skip);
    if (!record) return NULL;
    Py_INCREF(rank);
    PyTuple_SET_ITEM(record, RECORD_RANK, rank);
    if (layer) { Py_INCREF(layer); PyTuple_SET_ITEM(record, RECORD_LAYER, layer); }
    for (Py_ssize_t i = skip; i < n; i++) {
        Py_INCREF(PyTuple_GET_ITEM(row, i));
        PyTuple_SET_ITEM(record, head + i - skip, PyTuple_GET_ITEM(row, i));
    }
    return record;
}

static PyObject *records(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 6) {
        PyErr_SetString(PyExc_TypeError, "records(rows, rank, layers, Slice, Sample, FlowEnd)");
        return NULL;
    }
    PyObject *rows = PySequence_Fast(argv[0], "rows must be a sequence"), *rank = argv[1], *layers = argv[2];
    if (!rows) return NULL;
    if (!PyList_CheckExact(layers)) {
        Py_DECREF(rows);
        PyErr_SetString(PyExc_TypeError, "layers must be a list");
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rows);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *row = PySequence_Fast_GET_ITEM(rows, i), *record = NULL;
        long kind = -3;
        if (PyTuple_CheckExact(row) && PyTuple_GET_SIZE(row) > ROW_FIRST_FIELD)
            kind = PyLong_AsLong(PyTuple_GET_ITEM(row, ROW_KIND));
        if (kind == -1 && PyErr_Occurred()) { Py_CLEAR(out); break; }
        if (kind >= 0 && kind < PyList_GET_SIZE(layers)) {
            record = record_of(argv[3], rank, PyList_GET_ITEM(layers, kind), row, ROW_FIRST_FIELD);
        } else if (kind == SAMPLE) {
            record = record_of(argv[4], rank, NULL, row, ROW_FIRST_FIELD);
        } else if (kind == FLOW_END) {
            long layer = PyLong_AsLong(PyTuple_GET_ITEM(row, ROW_FIRST_FIELD));
            if (layer >= 0 && layer < PyList_GET_SIZE(layers))
                record = record_of(argv[5], rank, PyList_GET_ITEM(layers, layer), row, ROW_FIRST_FIELD + 1);
            else if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "bad layer in a spill row");
        } else {
            PyErr_SetString(PyExc_ValueError, "bad spill row");
        }
        if (!record) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, record);
    }
    Py_DECREF(rows);
    return out;
}

/* -- chrome_trace.Records.read_batches: a batch of events to records ------------------------- */

static PyObject *S_ph, *S_name, *S_pid, *S_tid, *S_ts, *S_dur, *S_cat, *S_id, *S_args;
static PyObject *S_M, *S_X, *S_C, *S_s, *S_f, *S_t, *S_HOST, *S_STREAM, *S_STEP_PREFIX, *EMPTY, *EMPTY_TUPLE;
static PyObject *S_ITERATION, *S_REDUCE, *S_PROFILE_STEP;

/* An event's field, as event.<name> gives it (a new reference). Events are msgspec Structs, whose
 * fields are slots at fixed offsets: read there, not through getattr's type lookup (a twentieth
 * of a summary conversion), for the last event type seen; anything else takes getattr. */
enum { F_PH, F_NAME, F_PID, F_TID, F_TS, F_DUR, F_CAT, F_ID, F_ARGS, N_FIELDS };
static PyObject **const FIELD_NAMES[N_FIELDS] = {&S_ph, &S_name, &S_pid, &S_tid, &S_ts, &S_dur, &S_cat, &S_id, &S_args};
static PyTypeObject *FIELDS_TYPE;  /* a strong reference: its offsets are below */
static Py_ssize_t FIELD_OFFSETS[N_FIELDS];

static void learn_fields(PyTypeObject *type) {
    for (int f = 0; f < N_FIELDS; f++) {
        PyObject *d = _PyType_Lookup(type, *FIELD_NAMES[f]);  /* borrowed, sets no error */
        PyMemberDef *m = d && Py_IS_TYPE(d, &PyMemberDescr_Type) ? ((PyMemberDescrObject *)d)->d_member : NULL;
        FIELD_OFFSETS[f] = m && m->type == T_OBJECT_EX && !(m->flags & PY_AUDIT_READ) ? m->offset : -1;
    }
    Py_INCREF(type);
    Py_XSETREF(FIELDS_TYPE, type);
}

static PyObject *slot_field(PyObject *event, int f) {
    if (Py_TYPE(event) != FIELDS_TYPE) learn_fields(Py_TYPE(event));
    if (FIELD_OFFSETS[f] >= 0) {
        PyObject *value = *(PyObject **)((char *)event + FIELD_OFFSETS[f]);
        if (value) return Py_NewRef(value);
    }
    return PyObject_GetAttr(event, *FIELD_NAMES[f]);
}

/* -- events scanned, not decoded (events.batches) -----------------------------------------
 *
 * msgspec makes an Event of nine objects for every event, and most events are then left out at
 * once (the vendor's overlap lanes; host events and tasks that do not compute, in a summary).
 * ``scan`` checks a batch as JSON and notes where each event's fields lie in its text; read_events
 * and steps_and_names make objects only for what they keep, by the same rules. Only what is plain
 * is scanned: keys without escapes, each field once and of the type Event takes (typed_as_event),
 * numbers of ordinary size, no lone surrogate escapes, nesting under 64 deep; anything else gives None, and msgspec decodes the batch (with
 * its rules and its errors). An event that Python reads is decoded by msgspec from its own text,
 * so it is the Event the batch would have given. */

enum { K_ABSENT, K_STR, K_STR_ESC, K_INT, K_NUM, K_NULL, K_OTHER };  /* OTHER: true, false, {}, [] */
typedef struct { uint32_t at, len; uint8_t kind; } Span;  /* a value's whole text in the batch */
typedef struct { uint32_t at, len; Span f[N_FIELDS]; } RawEvent;
typedef struct {
    PyObject_HEAD
    PyObject *data;  /* the batch's bytes */
    PyObject *decode_event, *decode_value;  /* msgspec's: an Event, any value */
    Py_ssize_t n, size;
    RawEvent *events;
} RawEvents;

typedef struct { const unsigned char *p, *end; } Scan;
#define MAX_DEPTH 64

static inline void sc_ws(Scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) s->p++;
}

static int hex_digit(unsigned char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The code of a \\uXXXX escape at p, or -1 */
static int escaped_code(const unsigned char *p, const unsigned char *end) {
    int code = 0;
    for (int k = 2; k < 6; k++) {
        int digit = p + k < end ? hex_digit(p[k]) : -1;
        if (digit < 0) return -1;
        code = code * 16 + digit;
    }
    return code;
}

/* A string from its quote: K_STR, K_STR_ESC (it has escapes), or 0 */
static unsigned char ORDINARY[256];  /* 1 for a byte a string holds as it is: not ", \\ or a control */

static inline __attribute__((always_inline)) int sc_string(Scan *s) {  /* inlined: +8% scanned/s */
    const unsigned char *p = s->p + 1, *end = s->end;
    int kind = K_STR;
    for (;;) {
        while (end - p >= 4 && ORDINARY[p[0]] && ORDINARY[p[1]] && ORDINARY[p[2]] && ORDINARY[p[3]]) p += 4;
        while (p < end && ORDINARY[*p]) p++;
        if (p >= end || *p < 0x20) return 0;
        if (*p == '"') {
            s->p = p + 1;
            return kind;
        }
        kind = K_STR_ESC;
        if (end - p < 2) return 0;
        if (p[1] == 'u') {
            int code = escaped_code(p, end);
            if (code >= 0xD800 && code <= 0xDBFF) {  /* a surrogate pair, or no text */
                p += 6;
                code = end - p >= 2 && p[0] == '\\' && p[1] == 'u' ? escaped_code(p, end) : -1;
                if (code < 0xDC00 || code > 0xDFFF) return 0;
            } else if (code < 0 || (code >= 0xDC00 && code <= 0xDFFF)) {
                return 0;
            }
            p += 6;
        } else if (p[1] && strchr("\"\\/bfnrt", p[1])) {
            p += 2;
        } else {
            return 0;
        }
    }
}

static int is_digit(const Scan *s) { return s->p < s->end && *s->p >= '0' && *s->p <= '9'; }

/* A number: K_INT, K_NUM (a fraction or an exponent), or 0 (not JSON's, or out of the ordinary) */
static int sc_number(Scan *s) {
    const unsigned char *start = s->p;
    int kind = K_INT;
    if (*s->p == '-') s->p++;
    if (!is_digit(s)) return 0;
    if (*s->p++ != '0')
        while (is_digit(s)) s->p++;
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (!is_digit(s)) return 0;
        while (is_digit(s)) s->p++;
        kind = K_NUM;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-')) s->p++;
        int exponent = 0, digits = 0;
        for (; is_digit(s); s->p++, digits++) exponent = exponent * 10 + (*s->p - '0');
        if (!digits || digits > 3 || exponent > 250) return 0;  /* 40 characters at most: never past 1e290 */
        kind = K_NUM;
    }
    return s->p - start <= 40 ? kind : 0;
}

static int sc_literal(Scan *s, const char *word, int kind) {
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n)) return 0;
    s->p += n;
    return kind;
}

/* Any value: its kind, or 0 */
static int sc_value(Scan *s, int depth) {
    if (s->p >= s->end) return 0;
    switch (*s->p) {
    case '"': return sc_string(s);
    case 't': return sc_literal(s, "true", K_OTHER);
    case 'f': return sc_literal(s, "false", K_OTHER);
    case 'n': return sc_literal(s, "null", K_NULL);
    case '{': case '[': {
        unsigned char close = *s->p == '{' ? '}' : ']';
        if (depth >= MAX_DEPTH) return 0;
        s->p++;
        sc_ws(s);
        if (s->p < s->end && *s->p == close) {
            s->p++;
            return K_OTHER;
        }
        for (;;) {
            if (close == '}') {
                if (s->p >= s->end || *s->p != '"' || !sc_string(s)) return 0;
                sc_ws(s);
                if (s->p >= s->end || *s->p != ':') return 0;
                s->p++;
                sc_ws(s);
            }
            if (!sc_value(s, depth + 1)) return 0;
            sc_ws(s);
            if (s->p >= s->end) return 0;
            if (*s->p++ == close) return K_OTHER;
            if (s->p[-1] != ',') return 0;
            sc_ws(s);
        }
    }
    default: return *s->p == '-' || (*s->p >= '0' && *s->p <= '9') ? sc_number(s) : 0;
    }
}

static int field_number(const unsigned char *key, Py_ssize_t n) {
    switch (n) {
    case 2: return !memcmp(key, "ph", 2) ? F_PH : !memcmp(key, "ts", 2) ? F_TS : !memcmp(key, "id", 2) ? F_ID : -1;
    case 3: return !memcmp(key, "pid", 3) ? F_PID : !memcmp(key, "tid", 3) ? F_TID : !memcmp(key, "dur", 3) ? F_DUR
                 : !memcmp(key, "cat", 3) ? F_CAT : -1;
    case 4: return !memcmp(key, "name", 4) ? F_NAME : !memcmp(key, "args", 4) ? F_ARGS : -1;
    default: return -1;
    }
}

/* Whether a field's value is of a type events.Event takes: ts and dur any (us_to_ns says
 * what it cannot read), args an object, the others a number, text or null. An event with
 * another makes its batch msgspec's, whose types and errors decide (events.batches). */
static int typed_as_event(int f, int kind, const unsigned char *value) {
    if (f == F_TS || f == F_DUR) return 1;
    if (f == F_ARGS) return *value == '{';
    return kind != K_OTHER;
}

/* An event object, its fields noted: 1, or 0 */
static int sc_event(Scan *s, const unsigned char *base, RawEvent *e) {
    const unsigned char *start = s->p;
    memset(e, 0, sizeof *e);
    s->p++;
    sc_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
    } else {
        for (;;) {
            const unsigned char *key = s->p;
            if (s->p >= s->end || *s->p != '"' || sc_string(s) != K_STR) return 0;
            int f = field_number(key + 1, s->p - key - 2);
            sc_ws(s);
            if (s->p >= s->end || *s->p != ':') return 0;
            s->p++;
            sc_ws(s);
            const unsigned char *value = s->p;
            int kind = sc_value(s, 1);
            if (!kind) return 0;
            if (f >= 0) {
                if (e->f[f].kind) return 0;  /* twice: msgspec takes the last */
                if (!typed_as_event(f, kind, value)) return 0;
                e->f[f] = (Span){(uint32_t)(value - base), (uint32_t)(s->p - value), (uint8_t)kind};
            }
            sc_ws(s);
            if (s->p >= s->end) return 0;
            if (*s->p++ == '}') break;
            if (s->p[-1] != ',') return 0;
            sc_ws(s);
        }
    }
    e->at = (uint32_t)(start - base);
    e->len = (uint32_t)(s->p - start);
    return 1;
}

static PyTypeObject RawEventsType;

/* scan(data, decode_event, decode_value) -> RawEvents, or None: see above. ``data`` is a JSON
 * array of event objects. */
static PyObject *scan(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 3) {
        PyErr_SetString(PyExc_TypeError, "scan(data, decode_event, decode_value)");
        return NULL;
    }
    if (!PyBytes_CheckExact(argv[0]) || PyBytes_GET_SIZE(argv[0]) >= (Py_ssize_t)UINT32_MAX) Py_RETURN_NONE;
    Py_ssize_t length = PyBytes_GET_SIZE(argv[0]);
    RawEvents *r = PyObject_New(RawEvents, &RawEventsType);
    if (!r) return NULL;
    r->data = Py_NewRef(argv[0]);
    r->decode_event = Py_NewRef(argv[1]);
    r->decode_value = Py_NewRef(argv[2]);
    r->n = r->size = 0;
    r->events = NULL;
    const unsigned char *base = (const unsigned char *)PyBytes_AS_STRING(argv[0]);
    Scan s = {base, base + length};
    sc_ws(&s);
    if (s.p >= s.end || *s.p++ != '[') goto not_plain;
    sc_ws(&s);
    if (s.p < s.end && *s.p == ']') {
        s.p++;
    } else {
        for (;;) {
            if (s.p >= s.end || *s.p != '{') goto not_plain;
            if (r->n == r->size) {
                Py_ssize_t size = r->size ? 2 * r->size : 1024;
                RawEvent *grown = PyMem_Realloc(r->events, size * sizeof(RawEvent));
                if (!grown) {
                    Py_DECREF(r);
                    return PyErr_NoMemory();
                }
                r->events = grown;
                r->size = size;
            }
            if (!sc_event(&s, base, &r->events[r->n])) goto not_plain;
            r->n++;
            sc_ws(&s);
            if (s.p >= s.end) goto not_plain;
            if (*s.p++ == ']') break;
            if (s.p[-1] != ',') goto not_plain;
            sc_ws(&s);
        }
    }
    sc_ws(&s);
    if (s.p == s.end) return (PyObject *)r;
not_plain:
    Py_DECREF(r);
    Py_RETURN_NONE;
}

static void raw_events_dealloc(RawEvents *r) {
    Py_XDECREF(r->data);
    Py_XDECREF(r->decode_event);
    Py_XDECREF(r->decode_value);
    PyMem_Free(r->events);
    PyObject_Free(r);
}

static Py_ssize_t raw_events_length(RawEvents *r) { return r->n; }

static const char *span_text(const RawEvents *r, const Span *sp) { return PyBytes_AS_STRING(r->data) + sp->at; }

/* The event as msgspec decodes it alone: the Event of the batch's decoding */
static PyObject *raw_event(const RawEvents *r, Py_ssize_t i) {
    const RawEvent *e = &r->events[i];
    PyObject *text = PyBytes_FromStringAndSize(PyBytes_AS_STRING(r->data) + e->at, e->len);
    PyObject *event = text ? PyObject_CallOneArg(r->decode_event, text) : NULL;
    Py_XDECREF(text);
    return event;
}

static PyObject *raw_events_item(RawEvents *r, Py_ssize_t i) {
    if (i < 0 || i >= r->n) {
        PyErr_SetString(PyExc_IndexError, "event index out of range");
        return NULL;
    }
    return raw_event(r, i);
}

static PySequenceMethods raw_events_sequence = {
    .sq_length = (lenfunc)raw_events_length, .sq_item = (ssizeargfunc)raw_events_item,
};

static PyTypeObject RawEventsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "converters.readers._core.RawEvents",
    .tp_doc = "A batch of events as scan found them: len(), and each as an Event (decoded alone).",
    .tp_basicsize = sizeof(RawEvents),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)raw_events_dealloc,
    .tp_as_sequence = &raw_events_sequence,
};

/* An int of at most 18 digits: 1 and its value, or 0 */
static int small_int(const char *text, Py_ssize_t n, long long *value) {
    Py_ssize_t i = text[0] == '-';
    if (n - i < 1 || n - i > 18) return 0;
    long long v = 0;
    for (Py_ssize_t k = i; k < n; k++) v = v * 10 + (text[k] - '0');
    *value = i ? -v : v;
    return 1;
}

/* A field's value as msgspec gives it: Event's default where absent, args as bytes (raw JSON) */
static PyObject *span_value(const RawEvents *r, const Span *sp, int f) {
    const char *text = span_text(r, sp);
    long long v;
    switch (sp->kind) {
    case K_ABSENT:
        if (f == F_PH || f == F_NAME) return Py_NewRef(EMPTY);
        if (f == F_DUR) return PyLong_FromLong(0);
        if (f == F_ARGS) return PyBytes_FromStringAndSize("", 0);
        Py_RETURN_NONE;
    case K_NULL:
        if (f != F_ARGS) Py_RETURN_NONE;
        break;
    case K_STR:
        if (f != F_ARGS) {
            PyObject *str = PyUnicode_DecodeUTF8(text + 1, sp->len - 2, NULL);
            if (str) return str;
            PyErr_Clear();
        }
        break;
    case K_INT:
        if (f != F_ARGS && small_int(text, sp->len, &v)) return PyLong_FromLongLong(v);
        break;
    }
    PyObject *raw = PyBytes_FromStringAndSize(text, sp->len);
    if (!raw || f == F_ARGS) return raw;
    PyObject *value = PyObject_CallOneArg(r->decode_value, raw);
    Py_DECREF(raw);
    return value;
}

/* -- one event, scanned or decoded ------------------------------------------------------------ */

typedef struct { PyObject *obj; const RawEvents *raw; const RawEvent *e; } Ev;  /* obj, or raw's e */

static PyObject *field(const Ev *ev, int f) {
    return ev->obj ? slot_field(ev->obj, f) : span_value(ev->raw, &ev->e->f[f], f);
}

/* The event as an object: the Event, for Python's rules */
static PyObject *event_object(const Ev *ev) {
    return ev->obj ? Py_NewRef(ev->obj) : raw_event(ev->raw, ev->e - ev->raw->events);
}

/* The text of a scanned field that is a plain string, or NULL */
static const char *plain_str(const Ev *ev, int f, Py_ssize_t *n) {
    if (ev->obj || ev->e->f[f].kind != K_STR) return NULL;
    *n = ev->e->f[f].len - 2;
    return span_text(ev->raw, &ev->e->f[f]) + 1;
}

static int is(PyObject *text, PyObject *interned) {
    return text == interned || (PyUnicode_CheckExact(text) && PyUnicode_Compare(text, interned) == 0);
}

/* 1 if the field is a str equal to ``interned``, 0 if not, -1 on error */
static int field_is(const Ev *ev, int f, PyObject *interned) {
    Py_ssize_t n;
    const char *text = plain_str(ev, f, &n);
    if (text) return n == PyUnicode_GET_LENGTH(interned) && !memcmp(text, PyUnicode_DATA(interned), n);
    PyObject *value = field(ev, f);
    if (!value) return -1;
    int found = is(value, interned);
    Py_DECREF(value);
    return found;
}

/* 1 if the name is a str starting "ProfilerStep#", 0 if a str that does not, 2 if no str, -1 error */
static int step_name(const Ev *ev) {
    Py_ssize_t n;
    const char *text = plain_str(ev, F_NAME, &n);
    if (text) return n >= 13 && !memcmp(text, "ProfilerStep#", 13);
    PyObject *name = field(ev, F_NAME);
    if (!name) return -1;
    int found = PyUnicode_CheckExact(name) ? PyUnicode_Tailmatch(name, S_STEP_PREFIX, 0, PY_SSIZE_T_MAX, -1) : 2;
    Py_DECREF(name);
    return found;
}

/* 1 if the name is a str holding ``marker`` (its UTF-8 ``text``, ``n`` bytes), 0 if not, -1 on error:
 * the events that may be a user's step marker (Dialect.marks_step decides) */
static int name_holds(const Ev *ev, PyObject *marker, const char *text, Py_ssize_t n) {
    Py_ssize_t length;
    const char *name = plain_str(ev, F_NAME, &length);  /* plain: no escapes, its UTF-8 as written */
    if (name) {
        for (Py_ssize_t at = 0; at + n <= length; at++)
            if (name[at] == text[0] && !memcmp(name + at, text, n)) return 1;
        return 0;
    }
    PyObject *value = field(ev, F_NAME);
    if (!value) return -1;
    Py_ssize_t found = PyUnicode_CheckExact(value) ? PyUnicode_Find(value, marker, 0, PY_SSIZE_T_MAX, 1) : -1;
    Py_DECREF(value);
    return found == -2 ? -1 : found >= 0;
}

/* The event's phase: 'M', 'X', 's', 'f', 't' or 'C'; 0 for any other; -1 on error */
static int phase(const Ev *ev) {
    Py_ssize_t n;
    const char *text = plain_str(ev, F_PH, &n);
    if (text) return n == 1 && strchr("MXsftC", text[0]) ? text[0] : 0;
    PyObject *ph = field(ev, F_PH);
    if (!ph) return -1;
    int found = is(ph, S_M) ? 'M' : is(ph, S_X) ? 'X' : is(ph, S_s) ? 's' : is(ph, S_f) ? 'f' : is(ph, S_t) ? 't'
              : is(ph, S_C) ? 'C' : 0;
    Py_DECREF(ph);
    return found;
}

/* ns from µs as profilers write them: a number (``round(us * 1000)``, exact below 9e12 µs), or
 * a string of ASCII digits with at most 3 decimals, parsed exactly. Any other form (more
 * decimals, an exponent, huge values, bad input): 0 with *ok = 0, for the Python rules. */
static long long text_ns(const char *text, Py_ssize_t n, int *ok) {
    Py_ssize_t i = 0, digits_end;
    long long whole = 0, fraction = 0;
    int decimals = 0;
    *ok = 0;
    while (i < n && text[i] >= '0' && text[i] <= '9' && i < 16) whole = whole * 10 + (text[i++] - '0');
    if (i == 0 || whole >= 4611686018427387LL || (i < n && text[i] != '.')) return 0;  /* 2**62 ns: model.TIME_LIMIT_NS */
    digits_end = i;
    if (i < n)
        for (i++; i < n && decimals < 3 && text[i] >= '0' && text[i] <= '9'; i++, decimals++)
            fraction = fraction * 10 + (text[i] - '0');
    if (i != n || !(digits_end == n || decimals > 0 || digits_end + 1 == n)) return 0;
    while (decimals++ < 3) fraction *= 10;
    *ok = 1;
    return whole * 1000 + fraction;
}

static long long double_ns(double value, int *ok) {
    *ok = value > -9e12 && value < 9e12;
    return *ok ? (long long)nearbyint(value * 1000.0) : 0;
}

/* An int of µs is exact in ns at any size (Kineto writes epoch µs as ints): within ±2**62 ns
 * (model.TIME_LIMIT_NS), else Python's rules say why it is no time */
static long long int_ns(long long value, int *ok) {
    *ok = value >= -4611686018427387LL && value <= 4611686018427387LL;
    return *ok ? value * 1000 : 0;
}

static long long fast_ns(PyObject *us, int *ok) {
    *ok = 0;
    if (PyUnicode_CheckExact(us) && PyUnicode_IS_ASCII(us))
        return text_ns((const char *)PyUnicode_DATA(us), PyUnicode_GET_LENGTH(us), ok);
    if (PyFloat_CheckExact(us)) return double_ns(PyFloat_AS_DOUBLE(us), ok);
    if (PyLong_CheckExact(us)) {
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(us, &overflow);
        if (value == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
        return overflow ? 0 : int_ns(value, ok);
    }
    return 0;
}

/* The double a JSON number's text stands for, correctly rounded as msgspec reads it: exact
 * arithmetic where mantissa and power of ten are exact doubles, else Python's own parser */
static int number_value(const char *text, Py_ssize_t n, double *value) {
    static const double powers[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    Py_ssize_t i = text[0] == '-';
    unsigned long long mantissa = 0;
    int digits = 0, scale = 0;
    for (; i < n && text[i] >= '0' && text[i] <= '9'; i++, digits++) mantissa = mantissa * 10 + (text[i] - '0');
    if (i < n && text[i] == '.')
        for (i++; i < n && text[i] >= '0' && text[i] <= '9'; i++, digits++, scale++)
            mantissa = mantissa * 10 + (text[i] - '0');
    if (i == n && digits <= 15 && scale <= 22) {  /* below 2**53: exact, and one rounding */
        double d = (double)mantissa / powers[scale];
        *value = text[0] == '-' ? -d : d;
        return 1;
    }
    char copy[48];
    if (n >= (Py_ssize_t)sizeof copy) return 0;
    memcpy(copy, text, n);
    copy[n] = 0;
    *value = PyOS_string_to_double(copy, NULL, NULL);
    if (*value == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return 1;
}

/* Whether a time (after the rank's clock offset) is one the model holds: within ±2**62 ns
 * (model.TIME_LIMIT_NS); Python says why another is left out */
static inline int model_time(long long ns) { return ns > -TIME_LIMIT_NS && ns < TIME_LIMIT_NS; }

/* A time field in ns: 1 (and *ns), 0 if Python's rules must read it, -1 on error */
static int event_ns(const Ev *ev, int f, long long *ns) {
    int ok = 0;
    if (ev->obj) {
        PyObject *us = field(ev, f);
        if (!us) return -1;
        *ns = fast_ns(us, &ok);
        Py_DECREF(us);
        return ok;
    }
    const Span *sp = &ev->e->f[f];
    const char *text = span_text(ev->raw, sp);
    long long whole;
    double d;
    switch (sp->kind) {
    case K_ABSENT: *ns = 0; return f == F_DUR;  /* dur defaults to 0, ts to None */
    case K_STR: *ns = text_ns(text + 1, sp->len - 2, &ok); return ok;
    case K_INT: if (small_int(text, sp->len, &whole)) *ns = int_ns(whole, &ok); return ok;
    case K_NUM: if (number_value(text, sp->len, &d)) *ns = double_ns(d, &ok); return ok;
    }
    return 0;
}

/* us_to_ns(us, exact) -> int: ``fast_ns``, or ``exact(us)`` (times._exact_us_to_ns) */
static PyObject *us_to_ns(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 2) {
        PyErr_SetString(PyExc_TypeError, "us_to_ns(us, exact)");
        return NULL;
    }
    int ok;
    long long ns = fast_ns(argv[0], &ok);
    return ok ? PyLong_FromLongLong(ns) : PyObject_CallOneArg(argv[1], argv[0]);
}

/* Where the top-level "Task Type" of raw JSON args lies where the text alone gives what decoding
 * them gives (chrome_trace._task_type): once, after the only "{", a plain string without escapes,
 * not empty. NULL to leave the event to Python. */
static const char *task_type_in(const char *data, Py_ssize_t length, Py_ssize_t *n) {
    static const char key[] = "\"Task Type\":\"", name[] = "\"Task Type\"";
    const char *end = data + length, *at = NULL;
    int braces = 0;
    for (const char *p = data; p < end; p++) {
        if (*p == '{') {
            braces++;
        } else if (*p == '"' && end - p >= (Py_ssize_t)sizeof(name) - 1 && !memcmp(p, name, sizeof(name) - 1)) {
            if (at || braces != 1 || end - p < (Py_ssize_t)sizeof(key) - 1 || memcmp(p, key, sizeof(key) - 1))
                return NULL;  /* twice, nested, or not a plain string: decoding decides */
            at = p + sizeof(key) - 1;
        }
    }
    const char *close = at ? memchr(at, '"', end - at) : NULL;
    if (!close || memchr(at, '\\', close - at) || close == at) return NULL;
    *n = close - at;
    return at;
}

/* A NamedTuple of ``n`` fields from ``items`` (new references, stolen even on failure) */
static PyObject *record(PyObject *type, PyObject **items, Py_ssize_t n) {
    PyObject *made = NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!items[i]) goto done;
    if (!(made = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, n))) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTuple_SET_ITEM(made, i, items[i]);
        items[i] = NULL;
    }
done:
    for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(items[i]);
    return made;
}

/* What read_events remembers within a batch: the routes of scanned (pid, tid) texts (borrowed
 * from Records._routes, forgotten whenever Python runs), the events left out by (reason, pid
 * text) before they are counted in Records._unread, and the task types met (with whether they
 * compute), so a summary makes no object for what it leaves out. */
#define ROUTE_SLOTS 128
typedef struct { const char *pid, *tid; uint32_t pid_len, tid_len, generation; uint8_t pid_kind, tid_kind; PyObject *kind, *lane; } RouteSlot;
#define LEFT_SLOTS 32
typedef struct { int reason; Span pid; long long count; } LeftSlot;
#define TASK_SLOTS 32
typedef struct { char text[32]; Py_ssize_t n; PyObject *task; int compute; } TaskSlot;  /* compute -1: not asked */
#define NAME_SLOTS 1024
typedef struct { const char *text; Py_ssize_t n; PyObject *name; } NameSlot;

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
typedef struct { Made *at; Py_ssize_t n, cap; } MadeList;

typedef struct {
    PyObject *routes, *rank, *layer_type, *host, *stream, *slice_type, *flow_end_type, *sample_type, *out;
    MadeList *filed;  /* where records go to be packed by step (read_events' ``by_step``), or NULL: to ``out`` */
    PyObject *processes;  /* process names by pid (Records._processes), for counters */
    PyObject *unread, *reasons, *is_compute;  /* what is left out, counted by (reason: LEFT_OUT_*, pid) */
    PyObject *python_cats;  /* a set of categories whose events Python reads, or NULL */
    long long offset;
    int detail, saw_device;
    const RawEvents *raw;
    uint32_t generation;
    RouteSlot routes_seen[ROUTE_SLOTS];
    LeftSlot left[LEFT_SLOTS];
    int n_left, n_tasks;
    TaskSlot tasks[TASK_SLOTS];
    NameSlot names[NAME_SLOTS];  /* by a hash of their text */
} Batch;

/* unread[reason, pid] += count: 0, or -1 on error */
static int count_unread(Batch *b, int reason, PyObject *pid, long long count) {
    PyObject *key = PyTuple_Pack(2, PyTuple_GET_ITEM(b->reasons, reason), pid);
    if (!key) return -1;
    PyObject *known = PyDict_GetItemWithError(b->unread, key), *more = NULL;  /* a Counter: 0 if absent */
    long long n = known ? PyLong_AsLongLong(known) : 0;
    if (!PyErr_Occurred()) more = PyLong_FromLongLong(n + count);
    int rc = more ? PyDict_SetItem(b->unread, key, more) : -1;
    Py_XDECREF(more);
    Py_DECREF(key);
    return rc;
}

/* The counts of scanned events left out, into Records._unread, in the order first met */
static int flush_left(Batch *b) {
    int rc = 0;
    for (int i = 0; i < b->n_left && !rc; i++) {
        PyObject *pid = span_value(b->raw, &b->left[i].pid, F_PID);
        rc = pid ? count_unread(b, b->left[i].reason, pid, b->left[i].count) : -1;
        Py_XDECREF(pid);
    }
    b->n_left = 0;
    return rc;
}

static int same_text(const RawEvents *r, const Span *a, const Span *b) {
    return a->kind == b->kind && a->len == b->len && !memcmp(span_text(r, a), span_text(r, b), a->len);
}

/* unread[reason, event.pid] += 1: 1, or -1 on error */
static int left_out(Batch *b, int reason, const Ev *ev) {
    if (ev->obj) {
        PyObject *pid = field(ev, F_PID);
        int rc = pid ? count_unread(b, reason, pid, 1) : -1;
        Py_XDECREF(pid);
        return rc < 0 ? -1 : 1;
    }
    const Span *pid = &ev->e->f[F_PID];
    for (int i = 0; i < b->n_left; i++)
        if (b->left[i].reason == reason && same_text(b->raw, &b->left[i].pid, pid)) {
            b->left[i].count++;
            return 1;
        }
    if (b->n_left == LEFT_SLOTS && flush_left(b) < 0) return -1;
    b->left[b->n_left++] = (LeftSlot){reason, *pid, 1};
    return 1;
}

static void made_clear(Made *m) {
    Py_XDECREF(m->layer); Py_XDECREF(m->lane); Py_XDECREF(m->name); Py_XDECREF(m->task); Py_XDECREF(m->args);
    Py_XDECREF(m->record);
}

/* The NamedTuple of a record made in C, as the reader's rules make it (a new reference) */
static PyObject *made_record(Batch *b, const Made *m) {
    if (m->tag == P_SLICE) {
        PyObject *args = m->args ? Py_NewRef(m->args) : m->text ? PyBytes_FromStringAndSize(m->text, m->text_len) :
                         Py_NewRef(Py_None);
        PyObject *items[SLICE_FIELDS] = {
            [SLICE_RANK] = Py_NewRef(b->rank), [SLICE_LAYER] = Py_NewRef(m->layer), [SLICE_LANE] = Py_NewRef(m->lane),
            [SLICE_NAME] = Py_NewRef(m->name), [SLICE_START_NS] = PyLong_FromLongLong(m->start),
            [SLICE_DUR_NS] = PyLong_FromLongLong(m->dur), [SLICE_ARGS] = args, [SLICE_TASK_TYPE] = Py_NewRef(m->task),
            [SLICE_FLOWS_OUT] = Py_NewRef(EMPTY_TUPLE), [SLICE_FLOWS_IN] = Py_NewRef(EMPTY_TUPLE)};
        return record(b->slice_type, items, SLICE_FIELDS);
    }
    if (m->tag == P_SAMPLE) {
        PyObject *items[SAMPLE_FIELDS] = {
            [SAMPLE_RANK] = Py_NewRef(b->rank), [SAMPLE_LANE] = Py_NewRef(m->lane),
            [SAMPLE_START_NS] = PyLong_FromLongLong(m->start), [SAMPLE_VALUE] = PyFloat_FromDouble(m->value)};
        return record(b->sample_type, items, SAMPLE_FIELDS);
    }
    if (m->tag == P_FLOW_END) {
        PyObject *items[FLOW_END_FIELDS] = {
            [FLOW_END_RANK] = Py_NewRef(b->rank), [FLOW_END_LAYER] = Py_NewRef(m->layer),
            [FLOW_END_LANE] = Py_NewRef(m->lane), [FLOW_END_START_NS] = PyLong_FromLongLong(m->start),
            [FLOW_END_KEY] = Py_NewRef(m->name), [FLOW_END_STARTS] = PyBool_FromLong(m->starts)};
        return record(b->flow_end_type, items, FLOW_END_FIELDS);
    }
    return Py_NewRef(m->record);
}

/* A record made: onto ``filed`` (which takes its references), or as its NamedTuple onto ``out``.
 * 0, or -1 on error; its references are taken either way. */
static int emit(Batch *b, Made *m) {
    MadeList *list = b->filed;
    if (list && list->n == list->cap) {
        Py_ssize_t cap = list->cap ? list->cap * 2 : 1024;
        Made *at = PyMem_Realloc(list->at, cap * sizeof(Made));
        if (!at) { made_clear(m); PyErr_NoMemory(); return -1; }
        list->at = at;
        list->cap = cap;
    }
    if (list) {
        list->at[list->n++] = *m;
        return 0;
    }
    PyObject *made = made_record(b, m);
    made_clear(m);
    int rc = made ? PyList_Append(b->out, made) : -1;
    Py_XDECREF(made);
    return rc;
}

static uint32_t text_hash(const char *text, uint32_t n, uint32_t h) {
    for (uint32_t i = 0; i < n; i++) h = (h ^ (unsigned char)text[i]) * 16777619u;
    return h;
}

/* The remembered route of a scanned event's (pid, tid), or the free slot it would take, or NULL */
static RouteSlot *route_slot(Batch *b, const Ev *ev) {
    const Span *pid = &ev->e->f[F_PID], *tid = &ev->e->f[F_TID];
    const char *pid_text = span_text(b->raw, pid), *tid_text = span_text(b->raw, tid);
    uint32_t h = text_hash(tid_text, tid->len, text_hash(pid_text, pid->len, 2166136261u + pid->kind * 7 + tid->kind));
    for (int k = 0; k < 8; k++) {
        RouteSlot *slot = &b->routes_seen[(h + k) % ROUTE_SLOTS];
        if (slot->generation != b->generation) return slot;
        if (slot->pid_kind == pid->kind && slot->tid_kind == tid->kind && slot->pid_len == pid->len &&
            slot->tid_len == tid->len && !memcmp(slot->pid, pid_text, pid->len) && !memcmp(slot->tid, tid_text, tid->len))
            return slot;
    }
    return NULL;
}

/* The event's route (kind, lane) if known and to a layer or skipped (kind None): borrowed
 * items, else 0 */
static int route_of(Batch *b, const Ev *ev, PyObject **kind, PyObject **lane) {
    RouteSlot *slot = ev->obj ? NULL : route_slot(b, ev);
    if (slot && slot->generation == b->generation) {
        *kind = slot->kind;
        *lane = slot->lane;
        return 1;
    }
    PyObject *pid = field(ev, F_PID), *tid = pid ? field(ev, F_TID) : NULL;
    PyObject *key = tid ? PyTuple_Pack(2, pid, tid) : NULL;
    Py_XDECREF(pid); Py_XDECREF(tid);
    if (!key) return -1;
    PyObject *route = PyDict_GetItemWithError(b->routes, key);  /* borrowed */
    Py_DECREF(key);
    if (!route) return PyErr_Occurred() ? -1 : 0;
    if (!PyTuple_Check(route) || PyTuple_GET_SIZE(route) != ROUTE_FIELDS) return 0;
    *kind = PyTuple_GET_ITEM(route, ROUTE_KIND);
    *lane = PyTuple_GET_ITEM(route, ROUTE_LANE);
    int known = *kind == Py_None || (Py_TYPE(*kind) == (PyTypeObject *)b->layer_type && PyUnicode_CheckExact(*lane));
    if (known && slot) {
        const Span *p = &ev->e->f[F_PID], *t = &ev->e->f[F_TID];
        *slot = (RouteSlot){span_text(b->raw, p), span_text(b->raw, t), p->len, t->len, b->generation,
                            p->kind, t->kind, *kind, *lane};
    }
    return known;
}

/* The event's name (a new reference): a plain one is made once a batch and shared by its records,
 * so there are fewer objects to make, pack, unpack and free (a torch_npu rank: 570 names among
 * 350,000 slices), and the spill writes it as a number after its first time */
static PyObject *event_name(Batch *b, const Ev *ev) {
    Py_ssize_t n;
    const char *text = plain_str(ev, F_NAME, &n);
    if (!text) return field(ev, F_NAME);
    NameSlot *slot = &b->names[text_hash(text, (uint32_t)n, 2166136261u) % NAME_SLOTS];
    if (slot->name && slot->n == n && !memcmp(slot->text, text, n)) return Py_NewRef(slot->name);
    PyObject *name = field(ev, F_NAME);
    if (name && PyUnicode_CheckExact(name)) {
        Py_XSETREF(slot->name, Py_NewRef(name));
        slot->text = text;
        slot->n = n;
    }
    return name;
}

/* 1 if the dialect reads events of this event's category in Python, 0 if not, -1 on error */
static int python_cat(Batch *b, const Ev *ev) {
    if (!b->python_cats) return 0;
    PyObject *cat = field(ev, F_CAT);
    if (!cat) return -1;
    int found = PyUnicode_CheckExact(cat) ? PySet_Contains(b->python_cats, cat) : 0;
    Py_DECREF(cat);
    return found;
}

/* The task type of a device task's args (raw JSON): its slot (remembered), or NULL to leave the
 * event to Python (none found as plain text); -1 in *error on error */
static TaskSlot *task_of(Batch *b, const char *args, Py_ssize_t length, TaskSlot *spare, int *error) {
    Py_ssize_t n;
    const char *text = task_type_in(args, length, &n);
    if (!text) return NULL;
    for (int i = 0; i < b->n_tasks; i++)
        if (b->tasks[i].n == n && !memcmp(b->tasks[i].text, text, n)) return &b->tasks[i];
    TaskSlot *slot = n <= (Py_ssize_t)sizeof(spare->text) && b->n_tasks < TASK_SLOTS ? &b->tasks[b->n_tasks] : spare;
    if (!(slot->task = PyUnicode_DecodeUTF8(text, n, "replace"))) {
        *error = -1;
        return NULL;
    }
    slot->compute = -1;
    if (slot != spare) {
        memcpy(slot->text, text, n);
        slot->n = n;
        b->n_tasks++;
    }
    return slot;
}

/* 1 if the slot's task type computes, 0 if not, -1 on error */
static int computes(Batch *b, TaskSlot *slot) {
    if (slot->compute < 0) {
        PyObject *answer = PyObject_CallOneArg(b->is_compute, slot->task);
        slot->compute = answer ? PyObject_IsTrue(answer) : -1;
        Py_XDECREF(answer);
    }
    return slot->compute;
}

/* An "X" event as Records._complete takes it: 1 done, 0 Python's, -1 error */
static int fast_complete(Batch *b, const Ev *ev) {
    PyObject *kind, *lane, *args = NULL, *name = NULL;
    TaskSlot spare = {.task = NULL}, *task = NULL;
    int result = route_of(b, ev, &kind, &lane);
    if (result <= 0) return result;
    if (kind == Py_None) return left_out(b, LEFT_OUT_VENDOR, ev);
    if ((result = python_cat(b, ev)) != 0) return result < 0 ? -1 : 0;
    int host = kind == b->host, step = step_name(ev);
    if (step < 0) return -1;
    if (step == 2 || (host && step)) return 0;  /* no str, or ProfilerStep#N: a step */
    if (host && !b->detail) return left_out(b, LEFT_OUT_HOST, ev);
    const char *args_text = NULL;
    Py_ssize_t args_length = 0;
    Py_buffer view = {.obj = NULL};
    if (ev->obj) {
        if (!(args = field(ev, F_ARGS))) return -1;
        if (PyObject_GetBuffer(args, &view, PyBUF_SIMPLE) == 0) {
            args_text = view.buf;
            args_length = view.len;
            if (args_length && args_text[0] != '{') { result = 0; goto done; }  /* no object: Python's */
        } else {
            PyErr_Clear();
            int truth = PyObject_IsTrue(args);  /* not raw: Python's rules if it is not empty */
            if (truth) { Py_DECREF(args); return truth < 0 ? -1 : 0; }
        }
    } else if (ev->e->f[F_ARGS].kind != K_ABSENT) {
        args_text = span_text(ev->raw, &ev->e->f[F_ARGS]);
        args_length = ev->e->f[F_ARGS].len;
    }
    if (!host) b->saw_device = 1;
    result = -1;
    if (kind == b->stream) {
        int error = 0;
        if (args_length) task = task_of(b, args_text, args_length, &spare, &error);
        if (error) goto done;
        if (!task) { result = 0; goto done; }
        if (!b->detail) {  /* summary keeps compute tasks only */
            int compute = computes(b, task);
            if (compute <= 0) {
                result = compute < 0 ? -1 : left_out(b, LEFT_OUT_TASKS, ev);
                goto done;
            }
        }
    }
    long long start, length;
    if ((result = event_ns(ev, F_TS, &start)) <= 0 || (result = event_ns(ev, F_DUR, &length)) <= 0) goto done;
    result = 0;
    if (length < 0 || __builtin_add_overflow(start, b->offset, &start) || !model_time(start)) goto done;
    if (ev->obj && !args_length) Py_SETREF(args, Py_NewRef(Py_None));
    if (!(name = event_name(b, ev))) { result = -1; goto done; }
    Made m = {.tag = P_SLICE, .layer = Py_NewRef(kind), .lane = Py_NewRef(lane), .name = name,
              .task = Py_NewRef(task ? task->task : EMPTY), .args = args,
              .text = ev->obj || !args_length ? NULL : args_text, .text_len = args_length, .start = start, .dur = length};
    name = args = NULL;  /* taken */
    result = emit(b, &m) < 0 ? -1 : 1;
done:
    if (view.obj) PyBuffer_Release(&view);
    Py_XDECREF(args);
    Py_XDECREF(spare.task);
    return result;
}

/* A flow event as Records._flow_end makes it: 1 done, 0 Python's, -1 error */
static int fast_flow_end(Batch *b, const Ev *ev, int starts) {
    PyObject *kind, *lane, *cat = NULL, *id = NULL;
    int result = route_of(b, ev, &kind, &lane);
    if (result <= 0 || kind == Py_None) return result < 0 ? -1 : 0;
    if ((result = python_cat(b, ev)) != 0) return result < 0 ? -1 : 0;
    long long at;
    if ((result = event_ns(ev, F_TS, &at)) <= 0) return result;
    if (__builtin_add_overflow(at, b->offset, &at) || !model_time(at)) return 0;
    result = -1;
    if (!(cat = field(ev, F_CAT)) || !(id = field(ev, F_ID))) goto done;
    result = 0;  /* the key is f"{cat}:{id}": str() gives the same for these types */
    if (!(cat == Py_None || PyUnicode_CheckExact(cat)) || !(PyUnicode_CheckExact(id) || PyLong_CheckExact(id)))
        goto done;
    PyObject *key = PyUnicode_FromFormat("%S:%S", cat, id);
    Made m = {.tag = P_FLOW_END, .starts = (char)starts, .layer = Py_NewRef(kind), .lane = Py_NewRef(lane),
              .name = key, .start = at};
    result = !key ? (made_clear(&m), -1) : emit(b, &m) < 0 ? -1 : 1;
done:
    Py_XDECREF(cat); Py_XDECREF(id);
    return result;
}

/* A counter's arguments: each key's text and, where the value is a number, the double it is */
#define COUNTER_ARGS 16
typedef struct { const unsigned char *key; Py_ssize_t key_len; int numeric; double value; } CounterArg;

/* The arguments of a counter's raw JSON args (an object, already checked as JSON): how many, or
 * -1 for Python's rules (a key escaped or twice, a number past the ordinary, more than
 * COUNTER_ARGS arguments). A number is the double float() makes of what msgspec decodes. */
static int counter_args(const char *text, Py_ssize_t length, CounterArg *found) {
    Scan s = {(const unsigned char *)text, (const unsigned char *)text + length};
    int n = 0;
    sc_ws(&s);
    if (s.p >= s.end || *s.p++ != '{') return -1;
    sc_ws(&s);
    if (s.p < s.end && *s.p == '}') return 0;
    for (;;) {
        const unsigned char *key = s.p;
        if (n == COUNTER_ARGS || s.p >= s.end || *s.p != '"' || sc_string(&s) != K_STR) return -1;
        CounterArg *arg = &found[n];
        *arg = (CounterArg){key + 1, s.p - key - 2, 0, 0.0};
        for (int i = 0; i < n; i++)
            if (found[i].key_len == arg->key_len && !memcmp(found[i].key, arg->key, arg->key_len)) return -1;
        sc_ws(&s);
        if (s.p >= s.end || *s.p++ != ':') return -1;
        sc_ws(&s);
        const unsigned char *value = s.p;
        int kind = sc_value(&s, 2);  /* an event is depth 0, its args 1, their values 2 */
        long long whole;
        if (kind == K_INT) {
            if (!small_int((const char *)value, s.p - value, &whole)) return -1;
            arg->value = (double)whole;
        } else if (kind == K_NUM) {
            if (!number_value((const char *)value, s.p - value, &arg->value) || !isfinite(arg->value)) return -1;
        } else if (!kind) {
            return -1;
        }
        arg->numeric = kind == K_INT || kind == K_NUM;
        n++;
        sc_ws(&s);
        if (s.p >= s.end) return -1;
        if (*s.p++ == '}') return n;
        if (s.p[-1] != ',') return -1;
        sc_ws(&s);
    }
}

/* The counter's name as Records._counter makes it: "<process> <name>" unless the name starts
 * with its process's; NULL with no error for Python's rules (a name that is no str) */
static PyObject *counter_name(Batch *b, const Ev *ev) {
    PyObject *name = field(ev, F_NAME), *pid = name ? field(ev, F_PID) : NULL;
    if (!pid) { Py_XDECREF(name); return NULL; }
    PyObject *process = PyUnicode_CheckExact(name) ? PyDict_GetItemWithError(b->processes, pid) : NULL;
    Py_DECREF(pid);
    if (!PyUnicode_CheckExact(name) || (!process && PyErr_Occurred())) { Py_DECREF(name); return NULL; }
    if (!process || !PyUnicode_CheckExact(process) || !PyUnicode_GET_LENGTH(process) ||
        PyUnicode_Tailmatch(name, process, 0, PY_SSIZE_T_MAX, -1))
        return name;
    PyObject *named = PyUnicode_FromFormat("%U %U", process, name);
    Py_DECREF(name);
    return named;
}

/* A "C" event as Records._counter takes it in detail: 1 done, 0 Python's, -1 error */
static int fast_counter(Batch *b, const Ev *ev) {
    long long start;
    int result = event_ns(ev, F_TS, &start);
    if (result <= 0) return result;
    if (__builtin_add_overflow(start, b->offset, &start) || !model_time(start)) return 0;
    PyObject *args = NULL, *name = NULL;
    Py_buffer view = {.obj = NULL};
    const char *text = NULL;
    Py_ssize_t length = 0;
    if (ev->obj) {
        if (!(args = field(ev, F_ARGS)) || PyObject_GetBuffer(args, &view, PyBUF_SIMPLE) < 0) {
            Py_XDECREF(args);
            PyErr_Clear();
            return 0;
        }
        text = view.buf;
        length = view.len;
    } else if (ev->e->f[F_ARGS].kind != K_ABSENT) {
        text = span_text(ev->raw, &ev->e->f[F_ARGS]);
        length = ev->e->f[F_ARGS].len;
    }
    CounterArg found[COUNTER_ARGS];
    int n = length ? counter_args(text, length, found) : 0;
    result = 0;
    if (n < 0) goto done;
    if (n && !(name = counter_name(b, ev))) {
        result = PyErr_Occurred() ? -1 : 0;
        goto done;
    }
    Made made[COUNTER_ARGS] = {{0}};
    for (int i = 0; i < n && result == 0; i++) {
        if (!found[i].numeric) continue;
        PyObject *key = PyUnicode_DecodeUTF8((const char *)found[i].key, found[i].key_len, NULL);
        PyObject *lane = key ? PyUnicode_FromFormat("%U [%U]", name, key) : NULL;
        Py_XDECREF(key);
        if (!lane)  /* a key that is no UTF-8: Python's rules, before anything is made */
            result = PyErr_ExceptionMatches(PyExc_UnicodeDecodeError) ? (PyErr_Clear(), 2) : -1;
        else
            made[i] = (Made){.tag = P_SAMPLE, .lane = lane, .start = start, .value = found[i].value};
    }
    for (int i = 0; i < n; i++) {
        if (!made[i].tag) continue;
        if (result == 0) result = emit(b, &made[i]);  /* takes its references */
        else made_clear(&made[i]);
    }
    result = result == 0 ? 1 : result == 2 ? 0 : -1;
done:
    if (view.obj) PyBuffer_Release(&view);
    Py_XDECREF(args);
    Py_XDECREF(name);
    return result;
}

static RawEvents *raw_batch(PyObject *events) {
    return Py_IS_TYPE(events, &RawEventsType) ? (RawEvents *)events : NULL;
}

static Ev event_at(PyObject *events, const RawEvents *raw, Py_ssize_t i) {
    return raw ? (Ev){NULL, raw, &raw->events[i]} : (Ev){PyList_GET_ITEM(events, i), NULL, NULL};
}

static PyObject *pack_made(Batch *b, PyObject *by_step, Py_ssize_t from);

/* read_events(events, first_index, out, python, context[, by_step]) -> (metadata events, saw a device
 * event, filed)
 * The records of a batch's events (a list of events.Event, or RawEvents: Records.read_batches), appended
 * to ``out``: the common events in C, every other one by ``python(event, index)``
 * (Records._event); metadata is counted.
 * ``context``: a chrome_trace.ReadContext, the reader's state and rules; events of a category in
 * its ``python_cats`` (a set, or None) are all Python's.
 * ``by_step`` (a spill.ByStep: starts, orders): the records packed under their steps as pack_by_step packs them,
 * in the same pass, no NamedTuple made of what C reads: ``filed`` is (pack_by_step's runs, how
 * many records), ``out`` as it was. ``filed`` is None without ``by_step``, or where some record
 * cannot be packed: then ``out`` holds them all. */
static PyObject *read_events(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    PyObject *c = argc == 5 || argc == 6 ? argv[4] : NULL, *by_step = argc == 6 ? argv[5] : Py_None;
    RawEvents *raw = c ? raw_batch(argv[0]) : NULL;
    if (by_step != Py_None && (!PyTuple_Check(by_step) || PyTuple_GET_SIZE(by_step) != BY_STEP_FIELDS ||
                               !PyList_CheckExact(PyTuple_GET_ITEM(by_step, BY_STEP_STARTS)) ||
                               !PyDict_Check(PyTuple_GET_ITEM(by_step, BY_STEP_ORDERS))))
        c = NULL;
    if (!c || !(raw || PyList_CheckExact(argv[0])) || !PyList_CheckExact(argv[2]) || !PyTuple_Check(c) ||
        PyTuple_GET_SIZE(c) != READ_CONTEXT_FIELDS || !PyDict_Check(PyTuple_GET_ITEM(c, READ_CONTEXT_ROUTES)) ||
        !PyDict_Check(PyTuple_GET_ITEM(c, READ_CONTEXT_UNREAD)) || !PyDict_Check(PyTuple_GET_ITEM(c, READ_CONTEXT_PROCESSES)) ||
        !PyTuple_Check(PyTuple_GET_ITEM(c, READ_CONTEXT_REASONS)) ||
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(c, READ_CONTEXT_REASONS)) != LEFT_OUT_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "read_events(events: list | RawEvents, first_index, out: list, python, "
                                         "context[, by_step: (starts: list, orders: dict)])");
        return NULL;
    }
    Batch *b = PyMem_Calloc(1, sizeof(Batch));  /* zeroed: no route is remembered (generation 0) */
    if (!b) return PyErr_NoMemory();
    MadeList filed = {NULL, 0, 0};
    Py_ssize_t first_out = PyList_GET_SIZE(argv[2]);
    *b = (Batch){.routes = PyTuple_GET_ITEM(c, READ_CONTEXT_ROUTES), .rank = PyTuple_GET_ITEM(c, READ_CONTEXT_RANK),
                 .unread = PyTuple_GET_ITEM(c, READ_CONTEXT_UNREAD),
                 .reasons = PyTuple_GET_ITEM(c, READ_CONTEXT_REASONS),
                 .is_compute = PyTuple_GET_ITEM(c, READ_CONTEXT_IS_COMPUTE),
                 .layer_type = PyTuple_GET_ITEM(c, READ_CONTEXT_LAYER_TYPE),
                 .slice_type = PyTuple_GET_ITEM(c, READ_CONTEXT_SLICE_TYPE),
                 .flow_end_type = PyTuple_GET_ITEM(c, READ_CONTEXT_FLOW_END_TYPE),
                 .sample_type = PyTuple_GET_ITEM(c, READ_CONTEXT_SAMPLE_TYPE),
                 .processes = PyTuple_GET_ITEM(c, READ_CONTEXT_PROCESSES), .out = argv[2], .raw = raw,
                 .generation = 1, .filed = by_step == Py_None ? NULL : &filed};
    PyObject *python_cats = PyTuple_GET_ITEM(c, READ_CONTEXT_PYTHON_CATS);
    if (PyAnySet_Check(python_cats)) b->python_cats = python_cats;
    Py_ssize_t index = PyLong_AsSsize_t(argv[1]), metadata = 0;
    b->offset = PyLong_AsLongLong(PyTuple_GET_ITEM(c, READ_CONTEXT_OFFSET_NS));
    b->detail = PyObject_IsTrue(PyTuple_GET_ITEM(c, READ_CONTEXT_DETAIL));
    PyObject *result = NULL;
    if (PyErr_Occurred()) goto done;
    b->host = PyObject_GetAttr(b->layer_type, S_HOST);
    b->stream = b->host ? PyObject_GetAttr(b->layer_type, S_STREAM) : NULL;
    if (!b->stream) goto done;
    for (Py_ssize_t i = 0; i < (raw ? raw->n : PyList_GET_SIZE(argv[0])); i++, index++) {
        Ev ev = event_at(argv[0], raw, i);
        int ph = phase(&ev), done_here = 0;
        if (ph < 0) goto done;
        if (ph == 'M') {
            metadata++;
            done_here = 1;
        } else if (ph == 'X') {
            done_here = fast_complete(b, &ev);
        } else if (ph == 's' || ph == 'f' || ph == 't') {
            done_here = b->detail ? fast_flow_end(b, &ev, ph == 's') : left_out(b, LEFT_OUT_FLOWS, &ev);
        } else if (ph == 'C') {
            done_here = b->detail ? fast_counter(b, &ev) : left_out(b, LEFT_OUT_COUNTERS, &ev);
        }
        if (done_here < 0) goto done;
        if (!done_here) {  /* Python's: what C counted first, then Python, whose routes may change */
            if (flush_left(b) < 0) goto done;
            b->generation++;
            Py_ssize_t made_before = PyList_GET_SIZE(argv[2]);
            PyObject *event = event_object(&ev), *at = event ? PyLong_FromSsize_t(index) : NULL;
            PyObject *ignored = at ? PyObject_CallFunctionObjArgs(argv[3], event, at, NULL) : NULL;
            Py_XDECREF(event); Py_XDECREF(at);
            if (!ignored) goto done;
            Py_DECREF(ignored);
            for (Py_ssize_t k = made_before; b->filed && k < PyList_GET_SIZE(argv[2]); k++) {
                Made m = {.record = Py_NewRef(PyList_GET_ITEM(argv[2], k))};  /* in order among C's */
                if (emit(b, &m) < 0) goto done;
            }
        }
    }
    if (flush_left(b) < 0) goto done;
    for (int i = 0; i < b->n_tasks; i++) Py_CLEAR(b->tasks[i].task);  /* as pack_by_step's records would be: */
    for (int i = 0; i < NAME_SLOTS; i++) Py_CLEAR(b->names[i].name);  /* a str is shared if records share it */
    PyObject *runs = b->filed ? pack_made(b, by_step, first_out) : Py_NewRef(Py_None);
    if (runs) result = Py_BuildValue("(nON)", metadata, b->saw_device ? Py_True : Py_False, runs);
done:
    Py_XDECREF(b->host); Py_XDECREF(b->stream);
    for (int i = 0; i < b->n_tasks; i++) Py_XDECREF(b->tasks[i].task);
    for (int i = 0; i < NAME_SLOTS; i++) Py_XDECREF(b->names[i].name);
    for (Py_ssize_t i = 0; i < filed.n; i++) made_clear(&filed.at[i]);
    PyMem_Free(filed.at);
    PyMem_Free(b);
    return result;
}

/* steps_and_names(events, first_index, marker=None) -> ([metadata events], [(index, event) of possible steps])
 * The first pass over a batch (a list of Event, or RawEvents: Records.read_steps): "M" events,
 * and the "X" events that may be steps (category "Iteration Time", "Reduce" or Paddle's
 * "ProfileStep", or a name starting "ProfilerStep#"; with a ``marker``, a name holding it), as Events. */
static PyObject *steps_and_names(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    RawEvents *raw = argc == 2 || argc == 3 ? raw_batch(argv[0]) : NULL;
    PyObject *marker = argc == 3 && argv[2] != Py_None ? argv[2] : NULL;
    if ((argc != 2 && argc != 3) || !(raw || PyList_CheckExact(argv[0])) ||
        (marker && (!PyUnicode_CheckExact(marker) || !PyUnicode_GET_LENGTH(marker)))) {
        PyErr_SetString(PyExc_TypeError, "steps_and_names(events: list | RawEvents, first_index, marker: str = None)");
        return NULL;
    }
    Py_ssize_t index = PyLong_AsSsize_t(argv[1]), marker_n = 0;
    if (index == -1 && PyErr_Occurred()) return NULL;
    const char *marker_text = marker ? PyUnicode_AsUTF8AndSize(marker, &marker_n) : NULL;
    if (marker && !marker_text) return NULL;
    PyObject *names = PyList_New(0), *steps = PyList_New(0), *result = NULL;
    if (!names || !steps) goto done;
    for (Py_ssize_t i = 0; i < (raw ? raw->n : PyList_GET_SIZE(argv[0])); i++, index++) {
        Ev ev = event_at(argv[0], raw, i);
        int ph = phase(&ev), step = 0, rc = 0;
        if (ph < 0) goto done;
        if (ph == 'X') {
            if ((step = field_is(&ev, F_CAT, S_ITERATION)) == 0 && (step = field_is(&ev, F_CAT, S_REDUCE)) == 0 &&
                (step = field_is(&ev, F_CAT, S_PROFILE_STEP)) == 0)
                step = step_name(&ev);
            if (step < 0) goto done;
            step = step == 1;
            if (!step && marker && (step = name_holds(&ev, marker, marker_text, marker_n)) < 0) goto done;
        }
        if (ph == 'M' || step) {
            PyObject *event = event_object(&ev), *item = NULL;
            if (event && ph == 'M') item = Py_NewRef(event);
            else if (event) item = Py_BuildValue("(nO)", index, event);
            rc = item ? PyList_Append(ph == 'M' ? names : steps, item) : -1;
            Py_XDECREF(event); Py_XDECREF(item);
        }
        if (rc < 0) goto done;
    }
    result = PyTuple_Pack(2, names, steps);
done:
    Py_XDECREF(names); Py_XDECREF(steps);
    return result;
}

/* -- spill.StepSpill: records packed into bytes of our own and back ------------------------------
 *
 * marshal writes each int, str and tuple of a row as an object of its own (and looks every shared
 * one up in a table); these records have a fixed shape, so they are written as such: a tag per
 * record, little-endian 64-bit ints, strings as their UTF-8 with their length, or as the number
 * of the same (shared) str object written before: a lane, a task type. pack gives None for what it does
 * not know (args that are not raw JSON, an int past 64 bits, a str that is not UTF-8): those
 * batches go by marshal. */

#define PACK_REFS 1024  /* str objects remembered per batch, by identity: lanes, task types, names */

#define PACK_SLOTS 4096  /* a table of the remembered str objects, by address: at most a quarter full */
typedef struct { PyObject *text; int number; } PackRef;
typedef struct { Buf out; PackRef slots[PACK_SLOTS]; int n_refs, used[PACK_REFS]; } Packer;  /* used: slots taken */

static PackRef *pk_slot(Packer *p, PyObject *text) {  /* its slot, or the empty one it would take */
    size_t at = ((uintptr_t)text >> 4) % PACK_SLOTS;
    while (p->slots[at].text && p->slots[at].text != text) at = (at + 1) % PACK_SLOTS;
    return &p->slots[at];
}

static int pk_u64(Packer *p, unsigned long long v) {
    if (buf_reserve(&p->out, 8) < 0) return -1;
    for (int i = 0; i < 8; i++) p->out.data[p->out.len++] = (char)(v >> (8 * i));
    return 0;
}

/* 0 packed, 1 not packable, -1 error */
static int pk_str(Packer *p, PyObject *text) {
    if (!PyUnicode_CheckExact(text)) return 1;
    PackRef *slot = pk_slot(p, text);
    if (slot->text) return pk_u64(p, (unsigned long long)slot->number << 1 | 1);
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n);
    if (!utf8) { PyErr_Clear(); return 1; }
    int remember = Py_REFCNT(text) > 1 && p->n_refs < PACK_REFS;  /* shared: it may recur */
    if (remember) {
        p->used[p->n_refs] = (int)(slot - p->slots);
        *slot = (PackRef){text, p->n_refs++};
    }
    if (pk_u64(p, (unsigned long long)n << 2 | (unsigned long long)remember << 1) < 0 || buf_reserve(&p->out, n) < 0) return -1;
    memcpy(p->out.data + p->out.len, utf8, n);
    p->out.len += n;
    return 0;
}

static int pk_int(Packer *p, PyObject *value, int is_unsigned) {
    if (!PyLong_CheckExact(value)) return 1;
    int overflow = 0;
    if (is_unsigned) {
        if (_PyLong_Sign(value) < 0 || _PyLong_NumBits(value) > 64) return PyErr_Occurred() ? -1 : 1;
        return pk_u64(p, PyLong_AsUnsignedLongLongMask(value));
    }
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    return overflow ? 1 : pk_u64(p, (unsigned long long)v);
}

static int pk_flows(Packer *p, PyObject *flows) {
    if (!PyTuple_CheckExact(flows)) return 1;
    if (pk_u64(p, (unsigned long long)PyTuple_GET_SIZE(flows)) < 0) return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(flows); i++) {
        int rc = pk_int(p, PyTuple_GET_ITEM(flows, i), 1);
        if (rc) return rc;
    }
    return 0;
}

static int pk_layer(Packer *p, PyObject *orders, PyObject *layer) {
    PyObject *order = layer_order(orders, layer);
    long v = order ? PyLong_AsLong(order) : -1;
    if (v < 0 || v > 255) return PyErr_Occurred() ? -1 : 1;
    if (buf_reserve(&p->out, 1) < 0) return -1;
    p->out.data[p->out.len++] = (char)v;
    return 0;
}

static int pk_tag(Packer *p, char tag) {
    if (buf_reserve(&p->out, 1) < 0) return -1;
    p->out.data[p->out.len++] = tag;
    return 0;
}

/* A record's fields in the order they are packed, shared by a NamedTuple's packing (pk_record) and
 * that of a record read_events made (pk_made): 0 packed, 1 not packable, -1 error */
static int pk_slice_head(Packer *p, PyObject *orders, PyObject *layer, PyObject *lane, PyObject *name) {
    int rc;
    if ((rc = pk_tag(p, P_SLICE)) || (rc = pk_layer(p, orders, layer)) || (rc = pk_str(p, lane))) return rc;
    return pk_str(p, name);  /* then its start and length */
}

/* A Slice's args (``args``: None, or raw JSON; NULL: ``text``, NULL for None), task type and flows */
static int pk_slice_tail(Packer *p, PyObject *args, const char *text, Py_ssize_t text_len, PyObject *task,
                         PyObject *flows_out, PyObject *flows_in) {
    int rc;
    Py_buffer view = {.obj = NULL};
    if (args && args != Py_None) {  /* bytes, or msgspec.Raw: raw JSON */
        if (PyDict_Check(args) || PyObject_GetBuffer(args, &view, PyBUF_SIMPLE) < 0) { PyErr_Clear(); return 1; }
        text = view.buf;
        text_len = view.len;
    } else if (args) {
        text = NULL;
    }
    rc = !text ? pk_u64(p, 0) : pk_u64(p, (unsigned long long)text_len + 1) < 0 ? -1 : buf_put(&p->out, text, text_len);
    if (view.obj) PyBuffer_Release(&view);
    if (rc || (rc = pk_str(p, task)) || (rc = pk_flows(p, flows_out))) return rc;
    return pk_flows(p, flows_in);
}

static int pk_sample_head(Packer *p, PyObject *lane) {
    int rc = pk_tag(p, P_SAMPLE);
    return rc ? rc : pk_str(p, lane);  /* then its start and value */
}

static int pk_flow_end_head(Packer *p, PyObject *orders, PyObject *layer, PyObject *lane) {
    int rc;
    if ((rc = pk_tag(p, P_FLOW_END)) || (rc = pk_layer(p, orders, layer))) return rc;
    return pk_str(p, lane);  /* then its start */
}

static int pk_flow_end_tail(Packer *p, PyObject *key, int starts) {
    int rc = pk_str(p, key);
    return rc ? rc : pk_tag(p, (char)starts);
}

static int pk_record(Packer *p, PyObject *r, PyObject *const *argv) {
    PyTypeObject *type = Py_TYPE(r);
    int rc;
    if (type == (PyTypeObject *)argv[2] && PyTuple_GET_SIZE(r) == SLICE_FIELDS) {
        if ((rc = pk_slice_head(p, argv[1], PyTuple_GET_ITEM(r, SLICE_LAYER), PyTuple_GET_ITEM(r, SLICE_LANE),
                                PyTuple_GET_ITEM(r, SLICE_NAME))) ||
            (rc = pk_int(p, PyTuple_GET_ITEM(r, SLICE_START_NS), 0)) ||
            (rc = pk_int(p, PyTuple_GET_ITEM(r, SLICE_DUR_NS), 0)))
            return rc;
        return pk_slice_tail(p, PyTuple_GET_ITEM(r, SLICE_ARGS), NULL, 0, PyTuple_GET_ITEM(r, SLICE_TASK_TYPE),
                             PyTuple_GET_ITEM(r, SLICE_FLOWS_OUT), PyTuple_GET_ITEM(r, SLICE_FLOWS_IN));
    }
    if (type == (PyTypeObject *)argv[3] && PyTuple_GET_SIZE(r) == SAMPLE_FIELDS) {
        PyObject *value = PyTuple_GET_ITEM(r, SAMPLE_VALUE);
        if (!PyFloat_CheckExact(value)) return 1;
        double d = PyFloat_AS_DOUBLE(value);
        unsigned long long bits;
        memcpy(&bits, &d, 8);
        if ((rc = pk_sample_head(p, PyTuple_GET_ITEM(r, SAMPLE_LANE))) ||
            (rc = pk_int(p, PyTuple_GET_ITEM(r, SAMPLE_START_NS), 0)))
            return rc;
        return pk_u64(p, bits);
    }
    if (type == (PyTypeObject *)argv[4] && PyTuple_GET_SIZE(r) == FLOW_END_FIELDS) {
        PyObject *starts = PyTuple_GET_ITEM(r, FLOW_END_STARTS);
        if (!PyBool_Check(starts)) return 1;
        if ((rc = pk_flow_end_head(p, argv[1], PyTuple_GET_ITEM(r, FLOW_END_LAYER), PyTuple_GET_ITEM(r, FLOW_END_LANE))) ||
            (rc = pk_int(p, PyTuple_GET_ITEM(r, FLOW_END_START_NS), 0)))
            return rc;
        return pk_flow_end_tail(p, PyTuple_GET_ITEM(r, FLOW_END_KEY), starts == Py_True);
    }
    PyErr_Format(PyExc_TypeError, "not a record: %R", r);
    return -1;
}

/* A record read_events made in C, packed as pk_record packs its NamedTuple */
static int pk_made(Packer *p, const Made *m, PyObject *orders) {
    int rc;
    unsigned long long bits;
    switch (m->tag) {
    case P_SLICE:
        if ((rc = pk_slice_head(p, orders, m->layer, m->lane, m->name)) || (rc = pk_u64(p, (unsigned long long)m->start)) ||
            (rc = pk_u64(p, (unsigned long long)m->dur)))
            return rc;
        return pk_slice_tail(p, m->args, m->text, m->text_len, m->task, EMPTY_TUPLE, EMPTY_TUPLE);
    case P_SAMPLE:
        memcpy(&bits, &m->value, 8);
        if ((rc = pk_sample_head(p, m->lane)) || (rc = pk_u64(p, (unsigned long long)m->start))) return rc;
        return pk_u64(p, bits);
    default:
        if ((rc = pk_flow_end_head(p, orders, m->layer, m->lane)) || (rc = pk_u64(p, (unsigned long long)m->start)))
            return rc;
        return pk_flow_end_tail(p, m->name, m->starts);
    }
}

/* pack(records, orders, Slice, Sample, FlowEnd) -> bytes, or None: see above */
static PyObject *pack(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 5 || !PyList_CheckExact(argv[0]) || !PyDict_Check(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "pack(records: list, orders: dict, Slice, Sample, FlowEnd)");
        return NULL;
    }
    Packer p = {0};
    PyObject *out = NULL;
    int rc = 0;
    for (Py_ssize_t i = 0; !rc && i < PyList_GET_SIZE(argv[0]); i++) rc = pk_record(&p, PyList_GET_ITEM(argv[0], i), argv);
    if (rc == 0) out = PyBytes_FromStringAndSize(p.out.data ? p.out.data : "", p.out.len);
    else if (rc == 1) out = Py_NewRef(Py_None);
    PyMem_Free(p.out.data);
    return out;
}

typedef struct { const unsigned char *at, *end; PyObject *refs[PACK_REFS]; int n_refs; } Unpacker;

static int up_u64(Unpacker *u, unsigned long long *v) {
    if (u->end - u->at < 8) { PyErr_SetString(PyExc_ValueError, "a packed batch ends early"); return -1; }
    *v = 0;
    for (int i = 7; i >= 0; i--) *v = (*v << 8) | u->at[i];
    u->at += 8;
    return 0;
}

static int up_byte(Unpacker *u, unsigned char *v) {
    if (u->at >= u->end) { PyErr_SetString(PyExc_ValueError, "a packed batch ends early"); return -1; }
    *v = *u->at++;
    return 0;
}

static PyObject *up_str(Unpacker *u) {
    unsigned long long head;
    if (up_u64(u, &head) < 0) return NULL;
    if (head & 1) {
        if ((head >> 1) >= (unsigned long long)u->n_refs) { PyErr_SetString(PyExc_ValueError, "bad packed string"); return NULL; }
        return Py_NewRef(u->refs[head >> 1]);
    }
    unsigned long long n = head >> 2;
    if ((unsigned long long)(u->end - u->at) < n) { PyErr_SetString(PyExc_ValueError, "a packed batch ends early"); return NULL; }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)u->at, (Py_ssize_t)n, NULL);
    u->at += n;
    if (text && (head & 2)) {  /* numbered as pack numbered it */
        if (u->n_refs == PACK_REFS) { Py_DECREF(text); PyErr_SetString(PyExc_ValueError, "bad packed string"); return NULL; }
        u->refs[u->n_refs++] = text;  /* borrowed: the records hold it */
    }
    return text;
}

static PyObject *up_int(Unpacker *u, int is_unsigned) {
    unsigned long long v;
    if (up_u64(u, &v) < 0) return NULL;
    return is_unsigned ? PyLong_FromUnsignedLongLong(v) : PyLong_FromLongLong((long long)v);
}

static PyObject *up_flows(Unpacker *u) {
    unsigned long long n;
    if (up_u64(u, &n) < 0) return NULL;
    if (n == 0) return Py_NewRef(EMPTY_TUPLE);
    if (n > (unsigned long long)(u->end - u->at) / 8) { PyErr_SetString(PyExc_ValueError, "bad packed flows"); return NULL; }
    PyObject *flows = PyTuple_New((Py_ssize_t)n);
    for (Py_ssize_t i = 0; flows && i < (Py_ssize_t)n; i++) {
        PyObject *id = up_int(u, 1);
        if (!id) { Py_CLEAR(flows); break; }
        PyTuple_SET_ITEM(flows, i, id);
    }
    return flows;
}

static PyObject *up_layer(Unpacker *u, PyObject *layers) {
    unsigned char order;
    if (up_byte(u, &order) < 0) return NULL;
    if (order >= PyList_GET_SIZE(layers)) { PyErr_SetString(PyExc_ValueError, "bad layer in a packed batch"); return NULL; }
    return Py_NewRef(PyList_GET_ITEM(layers, order));
}

/* unpack(data, rank, layers, Slice, Sample, FlowEnd) -> the records pack was given */
static PyObject *unpack(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    Py_buffer view;
    if (argc != 6 || !PyList_CheckExact(argv[2]) || PyObject_GetBuffer(argv[0], &view, PyBUF_SIMPLE) < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "unpack(data, rank, layers: list, Slice, Sample, FlowEnd)");
        return NULL;
    }
    Unpacker u = {.at = view.buf, .end = (const unsigned char *)view.buf + view.len};
    PyObject *out = PyList_New(0), *layers = argv[2];
    while (out && u.at < u.end) {
        unsigned char tag = *u.at++;
        PyObject *made = NULL;
        if (tag == P_SLICE) {
            PyObject *items[SLICE_FIELDS] = {[SLICE_RANK] = Py_NewRef(argv[1]), [SLICE_LAYER] = up_layer(&u, layers)};
            unsigned long long args_len = 0;
            if (items[SLICE_LAYER] && (items[SLICE_LANE] = up_str(&u)) && (items[SLICE_NAME] = up_str(&u)) &&
                (items[SLICE_START_NS] = up_int(&u, 0)) && (items[SLICE_DUR_NS] = up_int(&u, 0)) &&
                up_u64(&u, &args_len) == 0) {
                if (args_len == 0) {
                    items[SLICE_ARGS] = Py_NewRef(Py_None);
                } else if (args_len - 1 <= (unsigned long long)(u.end - u.at)) {
                    items[SLICE_ARGS] = PyBytes_FromStringAndSize((const char *)u.at, (Py_ssize_t)(args_len - 1));
                    u.at += args_len - 1;
                } else {
                    PyErr_SetString(PyExc_ValueError, "a packed batch ends early");
                }
                if (items[SLICE_ARGS] && (items[SLICE_TASK_TYPE] = up_str(&u)) &&
                    (items[SLICE_FLOWS_OUT] = up_flows(&u)))
                    items[SLICE_FLOWS_IN] = up_flows(&u);
            }
            made = record(argv[3], items, SLICE_FIELDS);
        } else if (tag == P_SAMPLE) {
            PyObject *items[SAMPLE_FIELDS] = {[SAMPLE_RANK] = Py_NewRef(argv[1])};
            unsigned long long bits;
            if ((items[SAMPLE_LANE] = up_str(&u)) && (items[SAMPLE_START_NS] = up_int(&u, 0)) &&
                up_u64(&u, &bits) == 0) {
                double d;
                memcpy(&d, &bits, 8);
                items[SAMPLE_VALUE] = PyFloat_FromDouble(d);
            }
            made = record(argv[4], items, SAMPLE_FIELDS);
        } else if (tag == P_FLOW_END) {
            PyObject *items[FLOW_END_FIELDS] = {[FLOW_END_RANK] = Py_NewRef(argv[1]),
                                                [FLOW_END_LAYER] = up_layer(&u, layers)};
            unsigned char starts;
            if (items[FLOW_END_LAYER] && (items[FLOW_END_LANE] = up_str(&u)) &&
                (items[FLOW_END_START_NS] = up_int(&u, 0)) && (items[FLOW_END_KEY] = up_str(&u)) &&
                up_byte(&u, &starts) == 0)
                items[FLOW_END_STARTS] = PyBool_FromLong(starts);
            made = record(argv[5], items, FLOW_END_FIELDS);
        } else {
            PyErr_SetString(PyExc_ValueError, "bad tag in a packed batch");
        }
        if (!made || PyList_Append(out, made) < 0) Py_CLEAR(out);
        Py_XDECREF(made);
    }
    PyBuffer_Release(&view);
    return out;
}

/* -- spilled_flows.file_by_step: a batch's records filed under their steps ---------------------- */

/* by_kind(records, Slice, Sample, FlowEnd) -> (slices, samples, flow ends), each in the order
 * given (chrome_trace.step_records): one pass, not a comprehension per kind */
static PyObject *by_kind(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 4 || !PyList_CheckExact(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "by_kind(records: list, Slice, Sample, FlowEnd)");
        return NULL;
    }
    PyObject *lists[3] = {PyList_New(0), PyList_New(0), PyList_New(0)}, *result = NULL;
    if (!lists[0] || !lists[1] || !lists[2]) goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(argv[0]); i++) {
        PyObject *r = PyList_GET_ITEM(argv[0], i);
        for (int k = 0; k < 3; k++)
            if (Py_IS_TYPE(r, (PyTypeObject *)argv[1 + k]) && PyList_Append(lists[k], r) < 0) goto done;
    }
    result = PyTuple_Pack(3, lists[0], lists[1], lists[2]);
done:
    for (int k = 0; k < 3; k++) Py_XDECREF(lists[k]);
    return result;
}

/* The steps' starts as C numbers, with room for one more: NULL with an error set */
static long long *step_starts(PyObject *list) {
    Py_ssize_t n = PyList_GET_SIZE(list);
    long long *starts = PyMem_Calloc(n + 1, sizeof(long long));
    if (!starts) return (long long *)PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        starts[i] = PyLong_AsLongLong(PyList_GET_ITEM(list, i));
        if (starts[i] == -1 && PyErr_Occurred()) {
            PyMem_Free(starts);
            return NULL;
        }
    }
    return starts;
}

/* Where record ``r`` starts (``types``: Slice, Sample, FlowEnd), and whether it is a FlowEnd: 0, or
 * -1 with an error */
static int record_start(PyObject *r, PyObject *const *types, long long *ts, int *flow_end) {
    PyTypeObject *type = Py_TYPE(r);
    *flow_end = type == (PyTypeObject *)types[2];
    Py_ssize_t at = type == (PyTypeObject *)types[0] ? SLICE_START_NS :
                    type == (PyTypeObject *)types[1] ? SAMPLE_START_NS : *flow_end ? FLOW_END_START_NS : -1;
    if (at < 0 || PyTuple_GET_SIZE(r) <= at || (*flow_end && PyTuple_GET_SIZE(r) < FLOW_END_FIELDS)) {
        PyErr_Format(PyExc_TypeError, "not a record: %R", r);
        return -1;
    }
    int overflow = 0;
    *ts = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(r, at), &overflow);
    if (overflow) PyErr_SetString(PyExc_OverflowError, "a record past 2**63 ns");
    return PyErr_Occurred() ? -1 : 0;
}

/* The step a time falls in: the last whose start is at or before it (the first if none). The last
 * step found is kept with its bounds: records come in runs of one step. */
typedef struct { const long long *starts; Py_ssize_t n, index; long long low, high; } StepOf;

static Py_ssize_t step_of(StepOf *f, long long ts) {
    if (f->index >= 0 && ts >= f->low && ts < f->high) return f->index;
    Py_ssize_t lo = 0, hi = f->n;
    while (lo < hi) {  /* bisect_right */
        Py_ssize_t mid = (lo + hi) / 2;
        if (ts < f->starts[mid]) hi = mid; else lo = mid + 1;
    }
    f->index = lo > 0 ? lo - 1 : 0;
    f->low = f->index ? f->starts[f->index] : LLONG_MIN;
    f->high = f->index + 1 < f->n ? f->starts[f->index + 1] : LLONG_MAX;
    return f->index;
}

/* A flow end that ends an arrow (an arrow ending here is looked for from earlier steps): 1 and the
 * hash of its key; 0 for one that starts an arrow; -1 on error */
static int ending_hash(PyObject *r, Py_hash_t *h) {
    int starts_here = PyObject_IsTrue(PyTuple_GET_ITEM(r, FLOW_END_STARTS));
    if (starts_here) return starts_here < 0 ? -1 : 0;
    *h = PyObject_Hash(PyTuple_GET_ITEM(r, FLOW_END_KEY));
    return *h == -1 ? -1 : 1;
}

/* by_step(records, starts, Slice, Sample, FlowEnd) -> ({step: [records]}, {step: [hash(key)]}):
 * each record under the last step that starts at or before it (the first step if none), and
 * the hashes of the keys of the arrows that end there. */
static PyObject *by_step(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 5 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "by_step(records: list, starts: list, Slice, Sample, FlowEnd)");
        return NULL;
    }
    PyObject *records = argv[0], *buckets = PyDict_New(), *finishes = PyDict_New(), *result = NULL;
    PyObject *bucket = NULL, *number = NULL;  /* the step of the last record, and its list */
    StepOf steps = {step_starts(argv[1]), PyList_GET_SIZE(argv[1]), -1, 0, 0};
    if (!buckets || !finishes || !steps.starts) goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(records); i++) {
        PyObject *r = PyList_GET_ITEM(records, i);
        long long ts;
        int flow_end;
        if (record_start(r, argv + 2, &ts, &flow_end) < 0) goto done;
        Py_ssize_t before = steps.index;
        if (step_of(&steps, ts) != before) {
            Py_XSETREF(number, PyLong_FromSsize_t(steps.index));
            if (!number) goto done;
            bucket = PyDict_GetItemWithError(buckets, number);  /* borrowed */
            if (!bucket) {
                if (PyErr_Occurred() || !(bucket = PyList_New(0))) goto done;
                int rc = PyDict_SetItem(buckets, number, bucket);
                Py_DECREF(bucket);
                if (rc < 0) goto done;
            }
        }
        if (PyList_Append(bucket, r) < 0) goto done;
        Py_hash_t h;
        int ends = flow_end ? ending_hash(r, &h) : 0;
        if (ends <= 0) {
            if (ends < 0) goto done;
            continue;
        }
        PyObject *hashes = PyDict_GetItemWithError(finishes, number);
        if (!hashes) {
            if (PyErr_Occurred() || !(hashes = PyList_New(0))) goto done;
            int rc = PyDict_SetItem(finishes, number, hashes);
            Py_DECREF(hashes);
            if (rc < 0) goto done;
        }
        PyObject *value = PyLong_FromSsize_t(h);
        int rc = value ? PyList_Append(hashes, value) : -1;
        Py_XDECREF(value);
        if (rc < 0) goto done;
    }
    result = PyTuple_Pack(2, buckets, finishes);
done:
    PyMem_Free((void *)steps.starts);
    Py_XDECREF(number); Py_XDECREF(buckets); Py_XDECREF(finishes);
    return result;
}

static void pk_reset(Packer *p) {
    for (int i = 0; i < p->n_refs; i++) p->slots[p->used[i]].text = NULL;
    p->n_refs = 0;
    p->out.len = 0;
}

/* A batch being packed by step: its steps, the run packed so far, the hashes of the arrows ending
 * in it, and the runs done */
typedef struct { StepOf steps; Packer *p; Buf hashes; PyObject *runs; } StepPack;

static int sp_open(StepPack *sp, PyObject *starts) {
    *sp = (StepPack){{step_starts(starts), PyList_GET_SIZE(starts), -1, 0, 0}, NULL, {NULL, 0, 0}, NULL};
    if (!sp->steps.starts || !(sp->runs = PyList_New(0))) return -1;
    if (!(sp->p = PyMem_Calloc(1, sizeof(Packer)))) { PyErr_NoMemory(); return -1; }
    return 0;
}

static void sp_close(StepPack *sp) {
    if (sp->p) PyMem_Free(sp->p->out.data);
    PyMem_Free(sp->p); PyMem_Free((void *)sp->steps.starts); PyMem_Free(sp->hashes.data);
    Py_XDECREF(sp->runs);
}

/* The run packed so far, as (step, packed, hashes), onto the runs; the packer and hashes emptied */
static int end_run(StepPack *sp, Py_ssize_t step) {
    Packer *p = sp->p;
    if (!p->out.len) return 0;
    PyObject *run = Py_BuildValue("(ny#y#)", step, p->out.data, p->out.len,
                                  sp->hashes.data ? sp->hashes.data : "", sp->hashes.len);
    int rc = run ? PyList_Append(sp->runs, run) : -1;
    Py_XDECREF(run);
    pk_reset(p);
    sp->hashes.len = 0;
    return rc;
}

/* The next record starts at ``ts``: the run ends if its step is another. 0, or -1 on error */
static int sp_at(StepPack *sp, long long ts) {
    Py_ssize_t before = sp->steps.index;
    return step_of(&sp->steps, ts) != before ? end_run(sp, before) : 0;
}

/* The hash of the key of an arrow that ends in the run, after its record */
static int sp_ending(StepPack *sp, Py_hash_t h) {
    int64_t value = (int64_t)h;
    return buf_put(&sp->hashes, (const char *)&value, sizeof value);
}

/* pack_by_step(records, starts, orders, Slice, Sample, FlowEnd) -> [(step, bytes, bytes)], or None:
 * by_step's filing in one pass, a run of records of one step at a time: each run packed as pack
 * packs it, with the hashes of the keys of the arrows that end in it as native 64-bit ints (an
 * array("q")'s bytes). A step's runs in order hold its records in order; no list of a step's
 * records is made, no int a hash, and memory holds one packer whatever the steps. None where
 * pack would give None for a record (then by_step and StepSpill.add file the batch). */
static PyObject *pack_by_step(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 6 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[1]) || !PyDict_Check(argv[2])) {
        PyErr_SetString(PyExc_TypeError, "pack_by_step(records: list, starts: list, orders: dict, Slice, Sample, FlowEnd)");
        return NULL;
    }
    PyObject *records = argv[0], *result = NULL;
    StepPack sp;
    int rc = 0;
    if (sp_open(&sp, argv[1]) < 0) goto done;
    for (Py_ssize_t i = 0; !rc && i < PyList_GET_SIZE(records); i++) {
        PyObject *r = PyList_GET_ITEM(records, i);
        long long ts;
        int flow_end;
        if (record_start(r, argv + 3, &ts, &flow_end) < 0 || sp_at(&sp, ts) < 0) goto done;
        rc = pk_record(sp.p, r, argv + 1);  /* its argv[1..4]: orders, Slice, Sample, FlowEnd */
        if (rc || !flow_end) continue;
        Py_hash_t h;
        int ends = ending_hash(r, &h);
        if (ends < 0 || (ends && sp_ending(&sp, h) < 0)) goto done;
    }
    if (rc < 0 || (!rc && end_run(&sp, sp.steps.index) < 0)) goto done;
    result = rc ? Py_NewRef(Py_None) : Py_NewRef(sp.runs);
done:
    sp_close(&sp);
    return result;
}

/* read_events' records (``b->filed``, from ``out``'s item ``from`` on those Python made) packed
 * by step as pack_by_step packs their NamedTuples (``by_step``: a spill.ByStep). (runs, how
 * many records), ``out`` as it was; or None with every record in ``out`` where one cannot be packed */
static PyObject *pack_made(Batch *b, PyObject *by_step, Py_ssize_t from) {
    PyObject *orders = PyTuple_GET_ITEM(by_step, BY_STEP_ORDERS), *result = NULL;
    PyObject *const types[5] = {NULL, orders, b->slice_type, b->sample_type, b->flow_end_type};  /* pk_record's */
    PyObject *all = NULL;  /* the records, where pack_by_step would not pack them */
    StepPack sp;
    int rc = 0;
    if (sp_open(&sp, PyTuple_GET_ITEM(by_step, BY_STEP_STARTS)) < 0) goto done;
    for (Py_ssize_t i = 0; !rc && i < b->filed->n; i++) {
        const Made *m = &b->filed->at[i];
        long long ts = m->start;
        int flow_end = m->tag == P_FLOW_END, ends = 0;
        if ((!m->tag && record_start(m->record, types + 2, &ts, &flow_end) < 0) || sp_at(&sp, ts) < 0) goto done;
        rc = m->tag ? pk_made(sp.p, m, orders) : pk_record(sp.p, m->record, types);
        if (rc || !flow_end) continue;
        Py_hash_t h = 0;
        if (!m->tag) ends = ending_hash(m->record, &h);
        else if ((ends = !m->starts) && (h = PyObject_Hash(m->name)) == -1) goto done;
        if (ends < 0 || (ends && sp_ending(&sp, h) < 0)) goto done;
    }
    if (rc < 0 || (!rc && end_run(&sp, sp.steps.index) < 0)) goto done;
    if (rc && !(all = PyList_New(b->filed->n))) goto done;
    for (Py_ssize_t i = 0; all && i < b->filed->n; i++) {
        PyObject *r = made_record(b, &b->filed->at[i]);
        if (!r) goto done;
        PyList_SET_ITEM(all, i, r);
    }
    if (PyList_SetSlice(b->out, from, PyList_GET_SIZE(b->out), all) == 0)
        result = rc ? Py_NewRef(Py_None) : Py_BuildValue("(On)", sp.runs, b->filed->n);
done:
    Py_XDECREF(all);
    sp_close(&sp);
    return result;
}

/* later_steps(keys, loaded, index) -> {key: step}: for each key whose hash one of the steps after
 * ``index`` in ``loaded`` ({step: array("q") of the hashes of the keys of the arrows ending there})
 * holds, the last such step (spilled_flows.SpilledFinishes.lasts). The hashes go into a table
 * made for the call: memory keeps only the arrays, 8 bytes a hash, and no int is made a hash. */
typedef struct { long long hash, step; int used; } LaterSlot;

static LaterSlot *later_slot(LaterSlot *table, size_t mask, long long hash) {
    size_t at = (size_t)((unsigned long long)hash * 0x9E3779B97F4A7C15ULL >> 20) & mask;
    while (table[at].used && table[at].hash != hash) at = (at + 1) & mask;
    return &table[at];
}

static PyObject *later_steps(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 3 || !PyDict_CheckExact(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "later_steps(keys, loaded: dict, index)");
        return NULL;
    }
    long long index = PyLong_AsLongLong(argv[2]);
    if (index == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t total = 0, pos = 0;
    PyObject *step, *hashes, *found = NULL, *keys = NULL, *key;
    while (PyDict_Next(argv[1], &pos, &step, &hashes)) total += PyObject_Length(hashes);
    if (PyErr_Occurred()) return NULL;
    size_t size = 16;
    while (size < 2 * (size_t)total) size *= 2;
    LaterSlot *table = PyMem_Calloc(size, sizeof(LaterSlot));
    if (!table) return PyErr_NoMemory();
    for (pos = 0; PyDict_Next(argv[1], &pos, &step, &hashes);) {
        long long number = PyLong_AsLongLong(step);
        Py_buffer view;
        if ((number == -1 && PyErr_Occurred()) || PyObject_GetBuffer(hashes, &view, PyBUF_SIMPLE) < 0) goto done;
        const char *at = view.buf;
        for (Py_ssize_t i = 0; number > index && i + 8 <= view.len; i += 8) {
            long long hash;
            memcpy(&hash, at + i, 8);
            LaterSlot *slot = later_slot(table, size - 1, hash);
            if (!slot->used || slot->step < number) *slot = (LaterSlot){hash, number, 1};
        }
        PyBuffer_Release(&view);
    }
    if (!(found = PyDict_New()) || !(keys = PyObject_GetIter(argv[0]))) goto done;
    while ((key = PyIter_Next(keys))) {
        Py_hash_t h = PyObject_Hash(key);
        LaterSlot *slot = h == -1 ? NULL : later_slot(table, size - 1, (long long)h);
        PyObject *number = slot && slot->used ? PyLong_FromLongLong(slot->step) : NULL;
        int bad = h == -1 || (slot->used && (!number || PyDict_SetItem(found, key, number) < 0));
        Py_XDECREF(number);
        Py_DECREF(key);
        if (bad) break;
    }
done:
    PyMem_Free(table);
    Py_XDECREF(keys);
    if (PyErr_Occurred()) Py_CLEAR(found);
    return found;
}

/* -- flows.bind_ends: the slice each flow end binds to ------------------------------------------- */

typedef struct {
    long long start, neg_dur;  /* sorted by start, outer slices (longer) first at equal starts */
    Py_ssize_t index;
} Member;

static int member_order(const void *a, const void *b) {
    const Member *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    if (x->neg_dur != y->neg_dur) return x->neg_dur < y->neg_dur ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static int times_of(PyObject *s, long long *start, long long *dur) {
    int overflow = 0;
    *start = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(s, SLICE_START_NS), &overflow);
    if (!overflow && !(*start == -1 && PyErr_Occurred()))
        *dur = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(s, SLICE_DUR_NS), &overflow);
    if (overflow) PyErr_SetString(PyExc_OverflowError, "a slice past 2**63 ns");
    return PyErr_Occurred() ? -1 : 0;
}

/* The number of the lane (layer, lane) in ``lanes`` ({lane: [layer, number, ...]}): -1 if it
 * has none, -2 on error; with ``add``, a new lane gets number ``*count`` (then counted). Keyed by
 * the lane's str, not a (layer, lane) tuple: no tuple made per slice. */
static Py_ssize_t lane_number(PyObject *lanes, PyObject *layer, PyObject *lane, Py_ssize_t *count) {
    PyObject *known = PyDict_GetItemWithError(lanes, lane);
    if (!known && PyErr_Occurred()) return -2;
    for (Py_ssize_t i = 0; known && i < PyList_GET_SIZE(known); i += 2) {
        int same = PyObject_RichCompareBool(PyList_GET_ITEM(known, i), layer, Py_EQ);
        if (same < 0) return -2;
        if (same) return PyLong_AsSsize_t(PyList_GET_ITEM(known, i + 1));
    }
    if (!count) return -1;
    PyObject *number = PyLong_FromSsize_t(*count);
    if (!number) return -2;
    int rc;
    if (known) {
        rc = PyList_Append(known, layer) < 0 || PyList_Append(known, number) < 0 ? -1 : 0;
    } else {
        PyObject *made = PyList_New(0);
        rc = !made || PyList_Append(made, layer) < 0 || PyList_Append(made, number) < 0 ||
             PyDict_SetItem(lanes, lane, made) < 0 ? -1 : 0;
        Py_XDECREF(made);
    }
    Py_DECREF(number);
    return rc < 0 ? -2 : (*count)++;
}

/* lane_number of a FlowEnd's lane */
static Py_ssize_t end_lane(PyObject *lanes, PyObject *end, Py_ssize_t *count) {
    return lane_number(lanes, PyTuple_GET_ITEM(end, FLOW_END_LAYER), PyTuple_GET_ITEM(end, FLOW_END_LANE), count);
}

/* For each flow end, the innermost slice of its lane (layer, lane) that holds its time, among the
 * 65 that start last at or before it: its index in ``found`` (-1: none); 0, or -1 on error */
static int enclosed(PyObject *slices, PyObject *ends, Py_ssize_t *found) {
    PyObject *lanes = PyDict_New(), *seen_layer = NULL, *seen_lane = NULL;
    Py_ssize_t n_lanes = 0, *sizes = NULL, *caps = NULL, seen_number = -1;
    Member **members = NULL;
    int rc = -1;
    if (!lanes) return -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ends); i++) {  /* the lanes that have ends */
        PyObject *end = PyList_GET_ITEM(ends, i);
        if (!PyTuple_Check(end) || PyTuple_GET_SIZE(end) < FLOW_END_FIELDS) {
            PyErr_SetString(PyExc_TypeError, "not a FlowEnd");
            goto done;
        }
        if (end_lane(lanes, end, &n_lanes) == -2) goto done;
    }
    members = PyMem_Calloc(n_lanes + 1, sizeof(Member *));
    sizes = PyMem_Calloc(n_lanes + 1, sizeof(Py_ssize_t));
    caps = PyMem_Calloc(n_lanes + 1, sizeof(Py_ssize_t));
    if (!members || !sizes || !caps) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(slices); i++) {  /* their slices */
        PyObject *s = PyList_GET_ITEM(slices, i);
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) <= SLICE_DUR_NS) {
            PyErr_SetString(PyExc_TypeError, "not a Slice");
            goto done;
        }
        PyObject *layer = PyTuple_GET_ITEM(s, SLICE_LAYER), *lane_text = PyTuple_GET_ITEM(s, SLICE_LANE);
        if (layer != seen_layer || lane_text != seen_lane) {  /* a lane's slices come in runs: no lookup a slice */
            seen_number = lane_number(lanes, layer, lane_text, NULL);
            if (seen_number == -2) goto done;
            seen_layer = layer, seen_lane = lane_text;
        }
        Py_ssize_t lane = seen_number;
        if (lane == -1) continue;
        long long start = 0, dur = 0;
        if (times_of(s, &start, &dur) < 0) goto done;
        if (sizes[lane] == caps[lane]) {
            caps[lane] = caps[lane] ? caps[lane] * 2 : 64;
            Member *grown = PyMem_Realloc(members[lane], caps[lane] * sizeof(Member));
            if (!grown) { PyErr_NoMemory(); goto done; }
            members[lane] = grown;
        }
        members[lane][sizes[lane]++] = (Member){start, -dur, i};
    }
    for (Py_ssize_t lane = 0; lane < n_lanes; lane++)
        if (sizes[lane] > 1) qsort(members[lane], sizes[lane], sizeof(Member), member_order);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ends); i++) {
        PyObject *end = PyList_GET_ITEM(ends, i);
        Py_ssize_t lane = end_lane(lanes, end, NULL);
        int overflow = 0;
        long long ts = lane >= 0 ? PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(end, FLOW_END_START_NS), &overflow)
                                 : 0;
        if (overflow) PyErr_SetString(PyExc_OverflowError, "a flow end past 2**63 ns");
        if (lane < 0 || PyErr_Occurred()) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "a flow end's lane was not numbered");
            goto done;
        }
        Py_ssize_t low = 0, high = sizes[lane];
        Member *m = members[lane];
        while (low < high) {  /* bisect_right over the starts */
            Py_ssize_t mid = (low + high) / 2;
            if (ts < m[mid].start) high = mid; else low = mid + 1;
        }
        found[i] = -1;
        for (Py_ssize_t j = low - 1; j >= 0 && j >= low - 1 - 64; j--) {
            if (m[j].start <= ts && ts <= m[j].start - m[j].neg_dur) {
                found[i] = m[j].index;
                break;
            }
        }
    }
    rc = 0;
done:
    if (members)
        for (Py_ssize_t lane = 0; lane < n_lanes; lane++) PyMem_Free(members[lane]);
    PyMem_Free(members); PyMem_Free(sizes); PyMem_Free(caps);
    Py_DECREF(lanes);
    return rc;
}

/* enclosing(slices, ends) -> [index or None]: ``enclosed``'s slice of each flow end */
static PyObject *enclosing(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 2 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "enclosing(slices: list, ends: list)");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(argv[1]), *found = PyMem_Malloc((n + 1) * sizeof(Py_ssize_t));
    PyObject *out = NULL;
    if (!found) return PyErr_NoMemory();
    if (enclosed(argv[0], argv[1], found) == 0 && (out = PyList_New(n)))
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *index = found[i] >= 0 ? PyLong_FromSsize_t(found[i]) : Py_NewRef(Py_None);
            if (!index) { Py_CLEAR(out); break; }
            PyList_SET_ITEM(out, i, index);
        }
    PyMem_Free(found);
    return out;
}

/* bind_ends(slices, ends, pending) -> (arrows, unstarted, last_starts, open_lasts, unended, outside_starts,
 * outside_ends), as flows.bind_ends says; ``pending``: the keys whose start an earlier step holds open */
typedef struct { long long ts; Py_ssize_t slice; int joined; } Start;

static int start_order(const void *a, const void *b) {
    const Start *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return (x->slice > y->slice) - (x->slice < y->slice);
}

static PyObject *bind_ends(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 3 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[1]) || !PyDict_CheckExact(argv[2])) {
        PyErr_SetString(PyExc_TypeError, "bind_ends(slices: list, ends: list, pending: dict)");
        return NULL;
    }
    Py_ssize_t *found = PyMem_Malloc((PyList_GET_SIZE(argv[1]) + 1) * sizeof(Py_ssize_t));
    if (!found) return PyErr_NoMemory();
    if (enclosed(argv[0], argv[1], found) < 0) { PyMem_Free(found); return NULL; }
    PyObject *ends = argv[1], *pending = argv[2], *groups = PyDict_New(), *keys = PyList_New(0);
    PyObject *arrows = PyList_New(0), *unstarted = PyList_New(0), *last_starts = PyDict_New(), *result = NULL;
    PyObject *open_lasts = PySet_New(NULL);
    Py_ssize_t n = PyList_GET_SIZE(ends), n_groups = 0, *sizes = NULL, *caps = NULL;
    Py_ssize_t unended = 0, outside[2] = {0, 0};  /* outside[1]: starts in no slice, outside[0]: ends */
    Start **starts = PyMem_Calloc(n + 1, sizeof(Start *));
    sizes = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    caps = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    if (!groups || !keys || !arrows || !unstarted || !last_starts || !open_lasts) goto done;
    if (!starts || !sizes || !caps) { PyErr_NoMemory(); goto done; }
    for (int pass = 0; pass < 2; pass++) {  /* the starts of each key, then each finish */
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *end = PyList_GET_ITEM(ends, i);
            Py_ssize_t slice = found[i];
            if (slice < 0 && pass == 1) continue;
            int starts_here = PyObject_IsTrue(PyTuple_GET_ITEM(end, FLOW_END_STARTS));
            if (starts_here < 0) goto done;
            if (slice < 0) { outside[starts_here]++; continue; }  /* counted once, in pass 0 */
            if (starts_here != (pass == 0)) continue;
            PyObject *key = PyTuple_GET_ITEM(end, FLOW_END_KEY), *group = PyDict_GetItemWithError(groups, key);
            if (!group && PyErr_Occurred()) goto done;
            Py_ssize_t g = group ? PyLong_AsSsize_t(group) : -1;
            int overflow = 0;
            long long ts = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(end, FLOW_END_START_NS), &overflow);
            if (overflow) PyErr_SetString(PyExc_OverflowError, "a flow end past 2**63 ns");
            if (PyErr_Occurred()) goto done;
            if (pass == 0) {
                if (g < 0) {
                    PyObject *number = PyLong_FromSsize_t(g = n_groups++);
                    int rc = number ? PyDict_SetItem(groups, key, number) : -1;
                    Py_XDECREF(number);
                    if (rc < 0 || PyList_Append(keys, key) < 0) goto done;
                }
                if (sizes[g] == caps[g]) {
                    caps[g] = caps[g] ? caps[g] * 2 : 2;
                    Start *grown = PyMem_Realloc(starts[g], caps[g] * sizeof(Start));
                    if (!grown) { PyErr_NoMemory(); goto done; }
                    starts[g] = grown;
                }
                starts[g][sizes[g]++] = (Start){ts, slice, 0};
                continue;
            }
            Py_ssize_t low = 0, high = g < 0 ? 0 : sizes[g];
            while (low < high) {  /* the starts at or before the finish */
                Py_ssize_t mid = (low + high) / 2;
                if (ts < starts[g][mid].ts) high = mid; else low = mid + 1;
            }
            /* (key, start, end) or (key, end, a later start or None); no Py_BuildValue: its format is
             * parsed at every call, and this is a call per arrow */
            Py_ssize_t other = low > 0 ? starts[g][low - 1].slice : g >= 0 ? starts[g][0].slice : -1;
            if (low > 0) {
                starts[g][low - 1].joined = 1;
            } else if (g >= 0) {  /* joins the start an earlier step holds open, else its first start here */
                int held = PyDict_Contains(pending, key);
                if (held < 0) goto done;
                if (!held) starts[g][0].joined = 1;
            }
            PyObject *number = other >= 0 ? PyLong_FromSsize_t(other) : Py_NewRef(Py_None), *item = NULL;
            PyObject *at = number ? PyLong_FromSsize_t(slice) : NULL;
            if (at) item = low > 0 ? PyTuple_Pack(3, key, number, at) : PyTuple_Pack(3, key, at, number);
            Py_XDECREF(number); Py_XDECREF(at);
            if (!item || PyList_Append(low > 0 ? arrows : unstarted, item) < 0) { Py_XDECREF(item); goto done; }
            Py_DECREF(item);
        }
        if (pass == 0)
            for (Py_ssize_t g = 0; g < n_groups; g++)
                if (sizes[g] > 1) qsort(starts[g], sizes[g], sizeof(Start), start_order);
    }
    for (Py_ssize_t g = 0; g < n_groups; g++) {
        PyObject *last = PyLong_FromSsize_t(starts[g][sizes[g] - 1].slice);
        int rc = last ? PyDict_SetItem(last_starts, PyList_GET_ITEM(keys, g), last) : -1;
        Py_XDECREF(last);
        if (rc < 0) goto done;
        for (Py_ssize_t j = 0; j < sizes[g] - 1; j++) unended += !starts[g][j].joined;  /* its id used again */
        if (!starts[g][sizes[g] - 1].joined && PySet_Add(open_lasts, PyList_GET_ITEM(keys, g)) < 0) goto done;
    }
    result = Py_BuildValue("(OOOOnnn)", arrows, unstarted, last_starts, open_lasts, unended, outside[1], outside[0]);
done:
    for (Py_ssize_t g = 0; starts && g < n_groups; g++) PyMem_Free(starts[g]);
    PyMem_Free(starts); PyMem_Free(sizes); PyMem_Free(caps);
    PyMem_Free(found); Py_XDECREF(groups); Py_XDECREF(keys);
    Py_XDECREF(arrows); Py_XDECREF(unstarted); Py_XDECREF(last_starts); Py_XDECREF(open_lasts);
    return result;
}

/* -- flows.Linker._arrow: one arrow between two slices -------------------------------------- */

/* BLAKE2b (RFC 7693) with an 8-byte digest and no key: hashlib.blake2b(data, digest_size=8), read
 * as a little-endian int, is what flows.flow_id gives an arrow. */
static const uint64_t B2_IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};
static const uint8_t B2_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};
#define B2_ROTR(x, n) (((x) >> (n)) | ((x) << (64 - (n))))
#define B2_G(r, i, a, b, c, d) do { \
        a += b + m[B2_SIGMA[r][2 * (i)]]; d = B2_ROTR(d ^ a, 32); c += d; b = B2_ROTR(b ^ c, 24); \
        a += b + m[B2_SIGMA[r][2 * (i) + 1]]; d = B2_ROTR(d ^ a, 16); c += d; b = B2_ROTR(b ^ c, 63); \
    } while (0)

static void b2_compress(uint64_t h[8], const uint8_t block[128], uint64_t bytes, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) {
        m[i] = 0;
        for (int j = 7; j >= 0; j--) m[i] = (m[i] << 8) | block[8 * i + j];
    }
    for (int i = 0; i < 8; i++) { v[i] = h[i]; v[i + 8] = B2_IV[i]; }
    v[12] ^= bytes;
    if (last) v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        B2_G(r, 0, v[0], v[4], v[8], v[12]); B2_G(r, 1, v[1], v[5], v[9], v[13]);
        B2_G(r, 2, v[2], v[6], v[10], v[14]); B2_G(r, 3, v[3], v[7], v[11], v[15]);
        B2_G(r, 4, v[0], v[5], v[10], v[15]); B2_G(r, 5, v[1], v[6], v[11], v[12]);
        B2_G(r, 6, v[2], v[7], v[8], v[13]); B2_G(r, 7, v[3], v[4], v[9], v[14]);
    }
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

static uint64_t blake2b_64(const uint8_t *data, size_t len) {
    uint64_t h[8];
    uint8_t block[128];
    for (int i = 0; i < 8; i++) h[i] = B2_IV[i];
    h[0] ^= 0x01010000ULL ^ 8;  /* depth 1, fanout 1, no key, 8-byte digest */
    size_t done = 0;
    while (len - done > 128) {  /* every block but the last, which may be full */
        b2_compress(h, data + done, done + 128, 0);
        done += 128;
    }
    memset(block, 0, sizeof block);
    memcpy(block, data + done, len - done);
    b2_compress(h, block, len, 1);
    return h[0];  /* the digest's 8 bytes are h[0] little-endian */
}

/* flow_id(rank, key, k) -> flows.flow_id's int, for a key already made into text */
static PyObject *flow_id(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 1 || !PyUnicode_Check(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "flow_id(text: str)");
        return NULL;
    }
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(argv[0], &n);
    return text ? PyLong_FromUnsignedLongLong(blake2b_64((const uint8_t *)text, (size_t)n)) : NULL;
}

/* slices[index] = slices[index].with_flows(its flows_out + (flow,) or flows_in + (flow,)), the
 * Slice changed in place where the list holds the only reference to it (no one else can see it
 * change: an arrow costs no copy of its slices), else a new one: 0, or -1 on error */
static int add_flow(PyObject *slices, Py_ssize_t index, Py_ssize_t at, PyObject *flow) {
    PyObject *slice = PyList_GET_ITEM(slices, index);
    if (!PyTuple_Check(slice) || PyTuple_GET_SIZE(slice) != SLICE_FIELDS ||
        !PyTuple_Check(PyTuple_GET_ITEM(slice, at))) {
        PyErr_Format(PyExc_TypeError, "not a Slice: %R", slice);
        return -1;
    }
    PyObject *old = PyTuple_GET_ITEM(slice, at), *flows = PyTuple_New(PyTuple_GET_SIZE(old) + 1);
    if (!flows) return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(old); i++)
        PyTuple_SET_ITEM(flows, i, Py_NewRef(PyTuple_GET_ITEM(old, i)));
    PyTuple_SET_ITEM(flows, PyTuple_GET_SIZE(old), Py_NewRef(flow));
    if (Py_REFCNT(slice) == 1) {
        PyTuple_SET_ITEM(slice, at, flows);
        Py_DECREF(old);
        return 0;
    }
    PyObject *made = Py_TYPE(slice)->tp_alloc(Py_TYPE(slice), SLICE_FIELDS);
    if (!made) { Py_DECREF(flows); return -1; }
    for (Py_ssize_t i = 0; i < SLICE_FIELDS; i++)
        PyTuple_SET_ITEM(made, i, i == at ? flows : Py_NewRef(PyTuple_GET_ITEM(slice, i)));
    PyList_SetItem(slices, index, made);
    return 0;
}

/* One arrow from source[first] to target[last], the k-th of its start (join's rules): k + 1 in
 * *made, or k if it would end before it starts (not made); 0, or -1 on error */
static int join(PyObject *source, Py_ssize_t first, PyObject *target, Py_ssize_t last, PyObject *key_text,
                long long k, long long rank, long long *made) {
    if (first < 0 || first >= PyList_GET_SIZE(source) || last < 0 || last >= PyList_GET_SIZE(target)) {
        PyErr_SetString(PyExc_IndexError, "arrow: no such slice");
        return -1;
    }
    PyObject *begin = PyList_GET_ITEM(source, first), *end = PyList_GET_ITEM(target, last);
    if (!PyUnicode_Check(key_text) || !PyTuple_Check(begin) || PyTuple_GET_SIZE(begin) != SLICE_FIELDS ||
        !PyTuple_Check(end) || PyTuple_GET_SIZE(end) != SLICE_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "arrow: not a Slice, or a key that is no str");
        return -1;
    }
    long long begin_ns = 0, end_ns = 0, dur = 0;
    if (times_of(begin, &begin_ns, &dur) < 0 || times_of(end, &end_ns, &dur) < 0) return -1;
    *made = k;
    if (end_ns < begin_ns) return 0;
    Py_ssize_t key_n;
    const char *key = PyUnicode_AsUTF8AndSize(key_text, &key_n);
    if (!key) return -1;
    char small[256], *text = small;
    size_t room = (size_t)key_n + 80;  /* the key, three 64-bit ints, their separators and a NUL */
    if (room > sizeof small && !(text = PyMem_Malloc(room))) { PyErr_NoMemory(); return -1; }
    char *at = decimal(text, rank);  /* "{rank}|{key}@{begin_ns}|{k}", as f"" writes it */
    *at++ = '|';
    memcpy(at, key, (size_t)key_n);
    at += key_n;
    *at++ = '@';
    at = decimal(at, begin_ns);
    *at++ = '|';
    at = decimal(at, k);
    uint64_t id = blake2b_64((const uint8_t *)text, (size_t)(at - text));
    if (text != small) PyMem_Free(text);
    PyObject *flow = PyLong_FromUnsignedLongLong(id);
    /* the arrow in after the arrow out: the same slice, if one, gets both */
    int rc = flow && add_flow(source, first, SLICE_FLOWS_OUT, flow) == 0 ? add_flow(target, last, SLICE_FLOWS_IN, flow) : -1;
    Py_XDECREF(flow);
    *made = k + 1;
    return rc;
}

/* arrow(source, first, target, last, key, k, rank) -> k + 1, or k if the arrow would end before
 * it starts (not made): source[first] gets the arrow out and target[last] the arrow in, with
 * the id flow_id(rank, f"{key}@{source[first].start_ns}", k), as flows.Linker._arrow makes them. */
static PyObject *arrow(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 7 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[2]) || !PyUnicode_Check(argv[4])) {
        PyErr_SetString(PyExc_TypeError, "arrow(source: list, first, target: list, last, key: str, k, rank)");
        return NULL;
    }
    Py_ssize_t first = PyLong_AsSsize_t(argv[1]), last = PyLong_AsSsize_t(argv[3]);
    long long k = PyLong_AsLongLong(argv[5]), rank = PyLong_AsLongLong(argv[6]), made;
    if (PyErr_Occurred()) return NULL;
    return join(argv[0], first, argv[2], last, argv[4], k, rank, &made) < 0 ? NULL : PyLong_FromLongLong(made);
}

/* arrows(slices, bound, made, rank) -> how many would end before they start (not made)
 * The arrows of one step within it (flows.Bound.arrows: (key, start, end) slice indices), in
 * order, as one ``arrow`` call each with k = made.get(start, 0), made[start] = its result. */
static PyObject *arrows(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 4 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[1]) || !PyDict_CheckExact(argv[2])) {
        PyErr_SetString(PyExc_TypeError, "arrows(slices: list, bound: list, made: dict, rank)");
        return NULL;
    }
    PyObject *slices = argv[0], *bound = argv[1], *made = argv[2];
    long long rank = PyLong_AsLongLong(argv[3]), backwards = 0;
    if (PyErr_Occurred()) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(bound); i++) {
        PyObject *item = PyList_GET_ITEM(bound, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_TypeError, "arrows: bound holds (key, start, end) tuples");
            return NULL;
        }
        PyObject *first = PyTuple_GET_ITEM(item, 1), *before = PyDict_GetItemWithError(made, first);
        if (!before && PyErr_Occurred()) return NULL;
        long long k = before ? PyLong_AsLongLong(before) : 0, now;
        Py_ssize_t start = PyLong_AsSsize_t(first), end = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 2));
        if (PyErr_Occurred() || join(slices, start, slices, end, PyTuple_GET_ITEM(item, 0), k, rank, &now) < 0)
            return NULL;
        backwards += now == k;
        PyObject *count = PyLong_FromLongLong(now);
        int rc = count ? PyDict_SetItem(made, first, count) : -1;
        Py_XDECREF(count);
        if (rc < 0) return NULL;
    }
    return PyLong_FromLongLong(backwards);
}

/* -- seek.names_and_steps: where a chunk of a file holds any of a few words ------------------------ */

typedef struct { const char *text; Py_ssize_t len, at; } Needle;  /* at: where its two bytes looked for lie */

static int found_one(PyObject *out, long long where, Py_ssize_t most) {
    if (PyList_GET_SIZE(out) >= most) return 1;
    PyObject *value = PyLong_FromLongLong(where);
    int rc = value ? PyList_Append(out, value) : -1;
    Py_XDECREF(value);
    return rc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* found_at's first part, 32 places at a time: from *i on while a needle fits in a full load */
__attribute__((target("avx2")))
static int found_wide(const char *data, Py_ssize_t n, const Needle *needles, Py_ssize_t n_needles,
                      Py_ssize_t longest, Py_ssize_t *i, PyObject *out, long long base, Py_ssize_t most) {
    __m256i first[8], second[8];
    int rc = 0;
    for (Py_ssize_t k = 0; k < n_needles; k++) {
        first[k] = _mm256_set1_epi8(needles[k].text[needles[k].at]);
        second[k] = _mm256_set1_epi8(needles[k].text[needles[k].at + 1]);
    }
    for (; rc == 0 && *i + longest + 32 <= n; *i += 32)
        for (Py_ssize_t k = 0; rc == 0 && k < n_needles; k++) {
            const char *p = data + *i + needles[k].at;
            unsigned mask = (unsigned)_mm256_movemask_epi8(_mm256_and_si256(
                _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)p), first[k]),
                _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(p + 1)), second[k])));
            for (; mask && rc == 0; mask &= mask - 1) {
                Py_ssize_t s = *i + __builtin_ctz(mask);
                if (!memcmp(data + s, needles[k].text, needles[k].len)) rc = found_one(out, base + s, most);
            }
        }
    return rc;
}
#endif

/* 1 if found_at looks 32 places at a time (else it is slower than scanning: seek.py does not use it) */
static int wide_search(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

/* found_at(data, needles, base, most) -> [base + where each needle lies in data], or None if more
 * than ``most``. ``needles``: (bytes, at) pairs; a needle is looked for where its bytes at and
 * at + 1 lie, 32 places at a time (AVX2, where the processor has it), and then compared whole:
 * one pass over the data for all of them, where bytes.find or memmem stop at each of JSON's
 * many quotes and backslashes (4.2 GB/s, against 0.5 for bytes.find). */
static PyObject *found_at(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    Py_buffer view;
    Needle needles[8];
    Py_ssize_t n_needles = argc == 4 && PyTuple_Check(argv[1]) ? PyTuple_GET_SIZE(argv[1]) : -1, longest = 0;
    for (Py_ssize_t k = 0; k < n_needles && n_needles <= 8; k++) {
        PyObject *item = PyTuple_GET_ITEM(argv[1], k), *text = PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2 ?
            PyTuple_GET_ITEM(item, 0) : NULL;
        Py_ssize_t at = text ? PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 1)) : -1;
        if (!text || !PyBytes_Check(text) || at < 0 || at + 2 > PyBytes_GET_SIZE(text)) { n_needles = -1; break; }
        needles[k] = (Needle){PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text), at};
        if (needles[k].len > longest) longest = needles[k].len;
    }
    PyErr_Clear();
    if (n_needles < 0 || n_needles > 8 || PyObject_GetBuffer(argv[0], &view, PyBUF_SIMPLE) < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "found_at(data, needles: tuple[(bytes, at)], base, most)");
        return NULL;
    }
    long long base = PyLong_AsLongLong(argv[2]);
    Py_ssize_t most = PyLong_AsSsize_t(argv[3]), n = view.len, i = 0;
    const char *data = view.buf;
    PyObject *out = PyErr_Occurred() ? NULL : PyList_New(0);
    int rc = out ? 0 : -1;
#if defined(__x86_64__) && defined(__GNUC__)
    if (rc == 0 && wide_search()) rc = found_wide(data, n, needles, n_needles, longest, &i, out, base, most);
#endif
    for (; rc == 0 && i < n; i++)  /* the rest, a place at a time */
        for (Py_ssize_t k = 0; rc == 0 && k < n_needles; k++)
            if (i + needles[k].len <= n && !memcmp(data + i, needles[k].text, needles[k].len))
                rc = found_one(out, base + i, most);
    PyBuffer_Release(&view);
    if (rc == 1) Py_SETREF(out, Py_NewRef(Py_None));
    if (rc < 0) Py_CLEAR(out);
    return out;
}

static int intern_all(void) {
    struct { PyObject **slot; const char *text; } names[] = {
        {&S_ph, "ph"}, {&S_name, "name"}, {&S_pid, "pid"}, {&S_tid, "tid"}, {&S_ts, "ts"}, {&S_dur, "dur"},
        {&S_cat, "cat"}, {&S_id, "id"}, {&S_args, "args"}, {&S_M, "M"}, {&S_X, "X"}, {&S_C, "C"}, {&S_s, "s"},
        {&S_f, "f"}, {&S_t, "t"}, {&S_HOST, "HOST"}, {&S_STREAM, "STREAM"}, {&S_STEP_PREFIX, "ProfilerStep#"},
        {&EMPTY, ""}, {&S_ITERATION, "Iteration Time"}, {&S_REDUCE, "Reduce"}, {&S_PROFILE_STEP, "ProfileStep"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!(*names[i].slot = PyUnicode_InternFromString(names[i].text))) return -1;
    return (EMPTY_TUPLE = PyTuple_New(0)) ? 0 : -1;
}

static PyMethodDef methods[] = {
    {"found_at", (PyCFunction)(void (*)(void))found_at, METH_FASTCALL,
     "found_at(data, needles, base, most) -> [where each needle lies, from base], or None if more than most"},
    {"enclosing", (PyCFunction)(void (*)(void))enclosing, METH_FASTCALL,
     "enclosing(slices, ends) -> for each flow end the index of its slice, or None"},
    {"steps_and_names", (PyCFunction)(void (*)(void))steps_and_names, METH_FASTCALL,
     "steps_and_names(events, first_index, marker=None) -> ([metadata events], [(index, event) of possible steps])"},
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "scan(data, decode_event, decode_value) -> RawEvents, or None if the batch is not plain JSON events"},
    {"read_events", (PyCFunction)(void (*)(void))read_events, METH_FASTCALL,
     "read_events(events, first_index, out, python, context[, by_step]) -> (metadata events, saw a device event, filed)"},
    {"us_to_ns", (PyCFunction)(void (*)(void))us_to_ns, METH_FASTCALL,
     "us_to_ns(us, exact) -> int: µs (a number, or a string with at most 3 decimals) as ns"},
    {"by_kind", (PyCFunction)(void (*)(void))by_kind, METH_FASTCALL,
     "by_kind(records, Slice, Sample, FlowEnd) -> (slices, samples, flow ends)"},
    {"pack_by_step", (PyCFunction)(void (*)(void))pack_by_step, METH_FASTCALL,
     "pack_by_step(records, starts, orders, Slice, Sample, FlowEnd) -> [(step, packed, hashes)] runs, or None"},
    {"later_steps", (PyCFunction)(void (*)(void))later_steps, METH_FASTCALL,
     "later_steps(keys, loaded, index) -> {key: the last step after index whose hashes hold hash(key)}"},
    {"by_step", (PyCFunction)(void (*)(void))by_step, METH_FASTCALL,
     "by_step(records, starts, Slice, Sample, FlowEnd) -> ({step: records}, {step: hashes of arrows ending})"},
    {"bind_ends", (PyCFunction)(void (*)(void))bind_ends, METH_FASTCALL,
     "bind_ends(slices, ends, pending) -> flows.Bound of flows.bind_ends"},
    {"flow_id", (PyCFunction)(void (*)(void))flow_id, METH_FASTCALL,
     "flow_id(text) -> the int of the 8-byte BLAKE2b digest of text (little-endian)"},
    {"arrow", (PyCFunction)(void (*)(void))arrow, METH_FASTCALL,
     "arrow(source, first, target, last, key, k, rank) -> k + 1, or k if the arrow would run backwards"},
    {"arrows", (PyCFunction)(void (*)(void))arrows, METH_FASTCALL,
     "arrows(slices, bound, made, rank) -> how many would run backwards: one step's arrows, as arrow does each"},
    {"pack", (PyCFunction)(void (*)(void))pack, METH_FASTCALL,
     "pack(records, orders, Slice, Sample, FlowEnd) -> bytes, or None if a record has what it cannot pack"},
    {"unpack", (PyCFunction)(void (*)(void))unpack, METH_FASTCALL,
     "unpack(data, rank, layers, Slice, Sample, FlowEnd) -> the records again"},
    {"rows", (PyCFunction)(void (*)(void))rows, METH_FASTCALL,
     "rows(records, orders, Slice, Sample, FlowEnd) -> list of plain tuples"},
    {"records", (PyCFunction)(void (*)(void))records, METH_FASTCALL,
     "records(rows, rank, layers, Slice, Sample, FlowEnd) -> the records again"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_core", .m_doc = "The readers' per-event helpers.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__core(void) {
    for (int c = 0x20; c < 256; c++) ORDINARY[c] = c != '"' && c != '\\';
    if (intern_all() < 0 || PyType_Ready(&RawEventsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddObjectRef(m, "RawEvents", (PyObject *)&RawEventsType) < 0) Py_CLEAR(m);
    if (m && PyModule_AddIntConstant(m, "WIDE_SEARCH", wide_search()) < 0) Py_CLEAR(m);
    return m;
}
