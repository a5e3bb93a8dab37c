/* The readers' per-event work in C, each beside the Python rules it follows:
 * - chrome_trace.Records.read_batches: the common events of a batch to records (read_events),
 *   the first pass's names and possible steps (steps_and_names), µs to ns (us_to_ns);
 * - chrome_trace._bind_ends: which slice and start each flow end binds to (enclosing, bind_ends);
 *   _Linker._arrow (arrow);
 * - chrome_trace._file_by_step: records under their steps (by_step);
 * - spill.StepSpill: records to plain rows and back (rows, records).
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

#define SAMPLE (-1)
#define FLOW_END (-2)

static PyObject *layer_order(PyObject *orders, PyObject *layer) {
    PyObject *order = PyDict_GetItemWithError(orders, layer);
    if (!order && !PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "no layer %R", layer);
    return order;  /* borrowed */
}

/* (kind, fields[from:]...), with field ``args_at`` as bytes if it is neither None nor a dict */
static PyObject *row_of(PyObject *kind, PyObject *r, Py_ssize_t from, Py_ssize_t args_at) {
    Py_ssize_t n = PyTuple_GET_SIZE(r);
    PyObject *row = PyTuple_New(1 + n - from);
    if (!row) return NULL;
    Py_INCREF(kind);
    PyTuple_SET_ITEM(row, 0, kind);
    for (Py_ssize_t i = from; i < n; i++) {
        PyObject *value = PyTuple_GET_ITEM(r, i);
        if (i == args_at && value != Py_None && !PyDict_CheckExact(value) && !PyBytes_CheckExact(value)) {
            value = PyObject_Bytes(value);  /* msgspec.Raw: pickled or marshalled only as bytes */
            if (!value) { Py_DECREF(row); return NULL; }
        } else {
            Py_INCREF(value);
        }
        PyTuple_SET_ITEM(row, 1 + i - from, value);
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
        if (type == (PyTypeObject *)argv[2] && PyTuple_GET_SIZE(r) == 10) {  /* Slice */
            if ((order = layer_order(orders, PyTuple_GET_ITEM(r, 1)))) row = row_of(order, r, 2, 6);
        } else if (type == (PyTypeObject *)argv[3] && PyTuple_GET_SIZE(r) == 4) {  /* Sample */
            row = row_of(sample, r, 1, -1);
        } else if (type == (PyTypeObject *)argv[4] && PyTuple_GET_SIZE(r) == 6) {  /* FlowEnd */
            if ((order = layer_order(orders, PyTuple_GET_ITEM(r, 1)))) {
                row = row_of(flow_end, r, 1, -1);
                if (row) {  /* the layer as its order */
                    Py_INCREF(order);
                    Py_SETREF(PyTuple_GET_ITEM(row, 1), order);
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
    Py_ssize_t n = PyTuple_GET_SIZE(row), head = layer ? 2 : 1;
    PyObject *record = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, head + n - skip);
    if (!record) return NULL;
    Py_INCREF(rank);
    PyTuple_SET_ITEM(record, 0, rank);
    if (layer) { Py_INCREF(layer); PyTuple_SET_ITEM(record, 1, layer); }
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
        if (PyTuple_CheckExact(row) && PyTuple_GET_SIZE(row) > 1) kind = PyLong_AsLong(PyTuple_GET_ITEM(row, 0));
        if (kind == -1 && PyErr_Occurred()) { Py_CLEAR(out); break; }
        if (kind >= 0 && kind < PyList_GET_SIZE(layers)) {
            record = record_of(argv[3], rank, PyList_GET_ITEM(layers, kind), row, 1);
        } else if (kind == SAMPLE) {
            record = record_of(argv[4], rank, NULL, row, 1);
        } else if (kind == FLOW_END) {
            long layer = PyLong_AsLong(PyTuple_GET_ITEM(row, 1));
            if (layer >= 0 && layer < PyList_GET_SIZE(layers))
                record = record_of(argv[5], rank, PyList_GET_ITEM(layers, layer), row, 2);
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

static PyObject *field(PyObject *event, int f) {
    if (Py_TYPE(event) != FIELDS_TYPE) learn_fields(Py_TYPE(event));
    if (FIELD_OFFSETS[f] >= 0) {
        PyObject *value = *(PyObject **)((char *)event + FIELD_OFFSETS[f]);
        if (value) return Py_NewRef(value);
    }
    return PyObject_GetAttr(event, *FIELD_NAMES[f]);
}

typedef struct {
    PyObject *routes, *rank, *layer_type, *host, *stream, *slice_type, *flow_end_type, *out;
    PyObject *unread, *reasons, *is_compute;  /* what is left out, counted by (reason, pid) */
    PyObject *python_cats;  /* a set of categories whose events Python reads, or NULL */
    long long offset;
    int detail, saw_device;
} Batch;

/* Records._unread reasons, in the order of the ``reasons`` tuple read_events gets */
enum { LEFT_HOST, LEFT_TASKS, LEFT_COUNTERS, LEFT_FLOWS, LEFT_VENDOR, REASONS };

/* unread[reason, event.pid] += 1: 1, or -1 on error */
static int left_out(Batch *b, int reason, PyObject *event) {
    PyObject *pid = field(event, F_PID);
    PyObject *key = pid ? PyTuple_Pack(2, PyTuple_GET_ITEM(b->reasons, reason), pid) : NULL;
    Py_XDECREF(pid);
    if (!key) return -1;
    PyObject *count = PyDict_GetItemWithError(b->unread, key), *more = NULL;  /* a Counter: 0 if absent */
    long long n = count ? PyLong_AsLongLong(count) : 0;
    if (!PyErr_Occurred()) more = PyLong_FromLongLong(n + 1);
    int rc = more ? PyDict_SetItem(b->unread, key, more) : -1;
    Py_XDECREF(more);
    Py_DECREF(key);
    return rc < 0 ? -1 : 1;
}

/* ns from µs as profilers write them: a number (``round(us * 1000)``, exact below 9e12 µs), or
 * a string of ASCII digits with at most 3 decimals, parsed exactly. Any other form (more
 * decimals, an exponent, huge values, bad input): 0 with *ok = 0, for the Python rules. */
static long long fast_ns(PyObject *us, int *ok) {
    *ok = 0;
    if (PyUnicode_CheckExact(us) && PyUnicode_IS_ASCII(us)) {
        const char *text = (const char *)PyUnicode_DATA(us);
        Py_ssize_t n = PyUnicode_GET_LENGTH(us), i = 0, digits_end;
        long long whole = 0, fraction = 0;
        int decimals = 0;
        while (i < n && text[i] >= '0' && text[i] <= '9' && i < 16) whole = whole * 10 + (text[i++] - '0');
        if (i == 0 || whole >= 9000000000000000LL || (i < n && text[i] != '.')) return 0;
        digits_end = i;
        if (i < n)
            for (i++; i < n && decimals < 3 && text[i] >= '0' && text[i] <= '9'; i++, decimals++)
                fraction = fraction * 10 + (text[i] - '0');
        if (i != n || !(digits_end == n || decimals > 0 || digits_end + 1 == n)) return 0;
        while (decimals++ < 3) fraction *= 10;
        *ok = 1;
        return whole * 1000 + fraction;
    }
    if (PyFloat_CheckExact(us)) {
        double value = PyFloat_AS_DOUBLE(us);
        if (!(value > -9e12 && value < 9e12)) return 0;
        *ok = 1;
        return (long long)nearbyint(value * 1000.0);
    }
    if (PyLong_CheckExact(us)) {
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(us, &overflow);
        if (value == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
        if (overflow || value <= -9000000000000LL || value >= 9000000000000LL) return 0;
        *ok = 1;
        return value * 1000;
    }
    return 0;
}

/* us_to_ns(us, exact) -> int: ``fast_ns``, or ``exact(us)`` (chrome_trace._exact_us_to_ns) */
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

/* The top-level "Task Type" of raw JSON args where the text alone gives what decoding them gives
 * (chrome_trace._task_type): once, after the only "{", a plain string without escapes. A new str,
 * or NULL (no error set) to leave the event to Python. */
static PyObject *task_type_of(PyObject *args) {
    static const char key[] = "\"Task Type\":\"", name[] = "\"Task Type\"";
    Py_buffer view;
    PyObject *found = NULL;
    if (PyObject_GetBuffer(args, &view, PyBUF_SIMPLE) < 0) { PyErr_Clear(); return NULL; }
    const char *data = view.buf, *end = data + view.len, *at = NULL;
    int braces = 0;
    for (const char *p = data; p < end; p++) {
        if (*p == '{') {
            braces++;
        } else if (*p == '"' && end - p >= (Py_ssize_t)sizeof(name) - 1 && !memcmp(p, name, sizeof(name) - 1)) {
            if (at || braces != 1 || end - p < (Py_ssize_t)sizeof(key) - 1 || memcmp(p, key, sizeof(key) - 1))
                goto done;  /* twice, nested, or not a plain string: decoding decides */
            at = p + sizeof(key) - 1;
        }
    }
    if (at) {
        const char *close = memchr(at, '"', end - at);
        if (close && !memchr(at, '\\', close - at) && close > at) {
            found = PyUnicode_DecodeUTF8(at, close - at, "replace");
            if (!found) PyErr_Clear();
        }
    }
done:
    PyBuffer_Release(&view);
    return found;
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

static int append_record(Batch *b, PyObject *type, PyObject **items, Py_ssize_t n) {
    PyObject *made = record(type, items, n);
    if (!made) return -1;
    int rc = PyList_Append(b->out, made);
    Py_DECREF(made);
    return rc;
}

/* The event's route (kind, lane) if known and to a layer or skipped (kind None): borrowed
 * items, else 0 */
static int route_of(Batch *b, PyObject *event, PyObject **kind, PyObject **lane) {
    PyObject *pid = field(event, F_PID), *tid = pid ? field(event, F_TID) : NULL;
    PyObject *key = tid ? PyTuple_Pack(2, pid, tid) : NULL;
    Py_XDECREF(pid); Py_XDECREF(tid);
    if (!key) return -1;
    PyObject *route = PyDict_GetItemWithError(b->routes, key);  /* borrowed */
    Py_DECREF(key);
    if (!route) return PyErr_Occurred() ? -1 : 0;
    if (!PyTuple_Check(route) || PyTuple_GET_SIZE(route) != 2) return 0;
    *kind = PyTuple_GET_ITEM(route, 0);
    *lane = PyTuple_GET_ITEM(route, 1);
    return *kind == Py_None || (Py_TYPE(*kind) == (PyTypeObject *)b->layer_type && PyUnicode_CheckExact(*lane));
}

/* 1 if the dialect reads events of this event's category in Python, 0 if not, -1 on error */
static int python_cat(Batch *b, PyObject *event) {
    if (!b->python_cats) return 0;
    PyObject *cat = field(event, F_CAT);
    if (!cat) return -1;
    int found = PyUnicode_CheckExact(cat) ? PySet_Contains(b->python_cats, cat) : 0;
    Py_DECREF(cat);
    return found;
}

/* An "X" event as Records._complete takes it: 1 done, 0 Python's, -1 error */
static int fast_complete(Batch *b, PyObject *event) {
    PyObject *kind, *lane, *name = NULL, *args = NULL, *ts = NULL, *dur = NULL, *task = NULL;
    int result = route_of(b, event, &kind, &lane), ok;
    if (result <= 0) return result;
    if (kind == Py_None) return left_out(b, LEFT_VENDOR, event);
    if ((result = python_cat(b, event)) != 0) return result < 0 ? -1 : 0;
    result = -1;
    if (!(name = field(event, F_NAME)) || !(args = field(event, F_ARGS)) ||
        !(ts = field(event, F_TS)) || !(dur = field(event, F_DUR)))
        goto done;
    result = 0;
    if (!PyUnicode_CheckExact(name)) goto done;
    if (kind == b->host && PyUnicode_Tailmatch(name, S_STEP_PREFIX, 0, PY_SSIZE_T_MAX, -1) == 1)
        goto done;  /* ProfilerStep#N: a step */
    if (kind == b->host && !b->detail) {
        result = left_out(b, LEFT_HOST, event);
        goto done;
    }
    int has_args = PyObject_IsTrue(args);
    if (has_args < 0) { result = -1; goto done; }
    if (kind != b->host) b->saw_device = 1;
    if (kind == b->stream && !(has_args && (task = task_type_of(args)))) goto done;
    if (task && !b->detail) {  /* summary keeps compute tasks only */
        PyObject *answer = PyObject_CallOneArg(b->is_compute, task);
        int compute = answer ? PyObject_IsTrue(answer) : -1;
        Py_XDECREF(answer);
        if (compute < 0) { result = -1; goto done; }
        if (!compute) {
            result = left_out(b, LEFT_TASKS, event);
            goto done;
        }
    }
    long long start = fast_ns(ts, &ok), length;
    if (!ok) goto done;
    length = fast_ns(dur, &ok);
    if (!ok || length < 0 || __builtin_add_overflow(start, b->offset, &start)) goto done;
    PyObject *items[10] = {
        Py_NewRef(b->rank), Py_NewRef(kind), Py_NewRef(lane), Py_NewRef(name),
        PyLong_FromLongLong(start), PyLong_FromLongLong(length), Py_NewRef(has_args ? args : Py_None),
        task ? Py_NewRef(task) : Py_NewRef(EMPTY), Py_NewRef(EMPTY_TUPLE), Py_NewRef(EMPTY_TUPLE)};
    result = append_record(b, b->slice_type, items, 10) < 0 ? -1 : 1;
done:
    Py_XDECREF(name); Py_XDECREF(args); Py_XDECREF(ts); Py_XDECREF(dur); Py_XDECREF(task);
    return result;
}

/* A flow event as Records._flow_end makes it: 1 done, 0 Python's, -1 error */
static int fast_flow_end(Batch *b, PyObject *event, int starts) {
    PyObject *kind, *lane, *ts = NULL, *cat = NULL, *id = NULL;
    int result = route_of(b, event, &kind, &lane), ok;
    if (result <= 0 || kind == Py_None) return result < 0 ? -1 : 0;
    if ((result = python_cat(b, event)) != 0) return result < 0 ? -1 : 0;
    result = -1;
    if (!(ts = field(event, F_TS)) || !(cat = field(event, F_CAT)) ||
        !(id = field(event, F_ID)))
        goto done;
    result = 0;  /* the key is f"{cat}:{id}": str() gives the same for these types */
    if (!(cat == Py_None || PyUnicode_CheckExact(cat)) || !(PyUnicode_CheckExact(id) || PyLong_CheckExact(id)))
        goto done;
    long long at = fast_ns(ts, &ok);
    if (!ok || __builtin_add_overflow(at, b->offset, &at)) goto done;
    PyObject *items[6] = {Py_NewRef(b->rank), Py_NewRef(kind), Py_NewRef(lane), PyLong_FromLongLong(at),
                          PyUnicode_FromFormat("%S:%S", cat, id), PyBool_FromLong(starts)};
    result = append_record(b, b->flow_end_type, items, 6) < 0 ? -1 : 1;
done:
    Py_XDECREF(ts); Py_XDECREF(cat); Py_XDECREF(id);
    return result;
}

static int is(PyObject *text, PyObject *interned) {
    return text == interned || (PyUnicode_CheckExact(text) && PyUnicode_Compare(text, interned) == 0);
}

/* read_events(events, first_index, out, python, context) -> (metadata events, saw a device event)
 * The records of a batch's events (Records.read_batches), appended to ``out``: the common events
 * in C, every other one by ``python(event, index)`` (Records._event); metadata is counted.
 * ``context``: (routes, rank, offset_ns, detail, unread, reasons, is_compute, Layer, Slice,
 * FlowEnd, python_cats), the reader's state and rules; events of a category in ``python_cats``
 * (a set, or None) are all Python's. */
static PyObject *read_events(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    PyObject *c = argc == 5 ? argv[4] : NULL;
    if (!c || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[2]) || !PyTuple_Check(c) ||
        PyTuple_GET_SIZE(c) != 11 || !PyDict_Check(PyTuple_GET_ITEM(c, 0)) || !PyDict_Check(PyTuple_GET_ITEM(c, 4)) ||
        !PyTuple_Check(PyTuple_GET_ITEM(c, 5)) || PyTuple_GET_SIZE(PyTuple_GET_ITEM(c, 5)) != REASONS) {
        PyErr_SetString(PyExc_TypeError, "read_events(events: list, first_index, out: list, python, context)");
        return NULL;
    }
    Batch b = {.routes = PyTuple_GET_ITEM(c, 0), .rank = PyTuple_GET_ITEM(c, 1), .unread = PyTuple_GET_ITEM(c, 4),
               .reasons = PyTuple_GET_ITEM(c, 5), .is_compute = PyTuple_GET_ITEM(c, 6),
               .layer_type = PyTuple_GET_ITEM(c, 7), .slice_type = PyTuple_GET_ITEM(c, 8),
               .flow_end_type = PyTuple_GET_ITEM(c, 9), .out = argv[2]};
    if (PyAnySet_Check(PyTuple_GET_ITEM(c, 10))) b.python_cats = PyTuple_GET_ITEM(c, 10);
    Py_ssize_t index = PyLong_AsSsize_t(argv[1]), metadata = 0;
    b.offset = PyLong_AsLongLong(PyTuple_GET_ITEM(c, 2));
    b.detail = PyObject_IsTrue(PyTuple_GET_ITEM(c, 3));
    if (PyErr_Occurred()) return NULL;
    b.host = PyObject_GetAttr(b.layer_type, S_HOST);
    b.stream = b.host ? PyObject_GetAttr(b.layer_type, S_STREAM) : NULL;
    PyObject *result = NULL;
    if (!b.stream) goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(argv[0]); i++, index++) {
        PyObject *event = PyList_GET_ITEM(argv[0], i), *ph = field(event, F_PH);
        if (!ph) goto done;
        int done_here = 0;
        if (is(ph, S_M)) {
            metadata++;
            done_here = 1;
        } else if (is(ph, S_X)) {
            done_here = fast_complete(&b, event);
        } else if (is(ph, S_s) || is(ph, S_f) || is(ph, S_t)) {
            done_here = b.detail ? fast_flow_end(&b, event, is(ph, S_s)) : left_out(&b, LEFT_FLOWS, event);
        } else if (is(ph, S_C) && !b.detail) {
            done_here = left_out(&b, LEFT_COUNTERS, event);
        }
        Py_DECREF(ph);
        if (done_here < 0) goto done;
        if (!done_here) {
            PyObject *at = PyLong_FromSsize_t(index);
            PyObject *ignored = at ? PyObject_CallFunctionObjArgs(argv[3], event, at, NULL) : NULL;
            Py_XDECREF(at);
            if (!ignored) goto done;
            Py_DECREF(ignored);
        }
    }
    result = Py_BuildValue("(nO)", metadata, b.saw_device ? Py_True : Py_False);
done:
    Py_XDECREF(b.host); Py_XDECREF(b.stream);
    return result;
}

/* steps_and_names(events, first_index) -> ([metadata events], [(index, event) of possible steps])
 * The first pass over a batch (Records.read_steps): "M" events, and the "X" events that may be
 * steps (category "Iteration Time", "Reduce" or Paddle's "ProfileStep", or a name starting
 * "ProfilerStep#"). */
static PyObject *steps_and_names(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 2 || !PyList_CheckExact(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "steps_and_names(events: list, first_index)");
        return NULL;
    }
    Py_ssize_t index = PyLong_AsSsize_t(argv[1]);
    if (index == -1 && PyErr_Occurred()) return NULL;
    PyObject *names = PyList_New(0), *steps = PyList_New(0), *result = NULL;
    if (!names || !steps) goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(argv[0]); i++, index++) {
        PyObject *event = PyList_GET_ITEM(argv[0], i), *ph = field(event, F_PH);
        if (!ph) goto done;
        int step = 0, metadata = is(ph, S_M), rc = 0;
        if (!metadata && is(ph, S_X)) {
            PyObject *cat = field(event, F_CAT), *name = cat ? field(event, F_NAME) : NULL;
            if (!name) { Py_XDECREF(cat); Py_DECREF(ph); goto done; }
            step = (PyUnicode_CheckExact(cat) && (is(cat, S_ITERATION) || is(cat, S_REDUCE) || is(cat, S_PROFILE_STEP))) ||
                   (PyUnicode_CheckExact(name) && PyUnicode_Tailmatch(name, S_STEP_PREFIX, 0, PY_SSIZE_T_MAX, -1) == 1);
            Py_DECREF(cat); Py_DECREF(name);
        }
        Py_DECREF(ph);
        if (metadata) {
            rc = PyList_Append(names, event);
        } else if (step) {
            PyObject *pair = Py_BuildValue("(nO)", index, event);
            rc = pair ? PyList_Append(steps, pair) : -1;
            Py_XDECREF(pair);
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

enum { P_SLICE = 1, P_SAMPLE = 2, P_FLOW_END = 3 };
#define PACK_REFS 64  /* str objects remembered per batch, by identity */

#define PACK_SLOTS 256  /* a table of the remembered str objects, by address: at most a quarter full */
typedef struct { PyObject *text; int number; } PackRef;
typedef struct { char *data; Py_ssize_t len, cap; PackRef slots[PACK_SLOTS]; int n_refs; } Packer;

static PackRef *pk_slot(Packer *p, PyObject *text) {  /* its slot, or the empty one it would take */
    size_t at = ((uintptr_t)text >> 4) % PACK_SLOTS;
    while (p->slots[at].text && p->slots[at].text != text) at = (at + 1) % PACK_SLOTS;
    return &p->slots[at];
}

static int pk_reserve(Packer *p, Py_ssize_t more) {
    if (p->len + more <= p->cap) return 0;
    Py_ssize_t cap = p->cap ? p->cap : 1 << 16;
    while (cap < p->len + more) cap *= 2;
    char *data = PyMem_Realloc(p->data, cap);
    if (!data) { PyErr_NoMemory(); return -1; }
    p->data = data;
    p->cap = cap;
    return 0;
}

static int pk_u64(Packer *p, unsigned long long v) {
    if (pk_reserve(p, 8) < 0) return -1;
    for (int i = 0; i < 8; i++) p->data[p->len++] = (char)(v >> (8 * i));
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
    if (remember) *slot = (PackRef){text, p->n_refs++};
    if (pk_u64(p, (unsigned long long)n << 2 | (unsigned long long)remember << 1) < 0 || pk_reserve(p, n) < 0) return -1;
    memcpy(p->data + p->len, utf8, n);
    p->len += n;
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
    if (pk_reserve(p, 1) < 0) return -1;
    p->data[p->len++] = (char)v;
    return 0;
}

static int pk_tag(Packer *p, char tag) {
    if (pk_reserve(p, 1) < 0) return -1;
    p->data[p->len++] = tag;
    return 0;
}

static int pk_record(Packer *p, PyObject *r, PyObject *const *argv) {
    PyTypeObject *type = Py_TYPE(r);
    int rc;
    if (type == (PyTypeObject *)argv[2] && PyTuple_GET_SIZE(r) == 10) {  /* Slice */
        PyObject *args = PyTuple_GET_ITEM(r, 6);
        if ((rc = pk_tag(p, P_SLICE)) || (rc = pk_layer(p, argv[1], PyTuple_GET_ITEM(r, 1))) ||
            (rc = pk_str(p, PyTuple_GET_ITEM(r, 2))) || (rc = pk_str(p, PyTuple_GET_ITEM(r, 3))) ||
            (rc = pk_int(p, PyTuple_GET_ITEM(r, 4), 0)) || (rc = pk_int(p, PyTuple_GET_ITEM(r, 5), 0)))
            return rc;
        if (args == Py_None) {
            rc = pk_u64(p, 0);
        } else {
            Py_buffer view;  /* bytes, or msgspec.Raw: raw JSON */
            if (PyDict_Check(args) || PyObject_GetBuffer(args, &view, PyBUF_SIMPLE) < 0) { PyErr_Clear(); return 1; }
            rc = pk_u64(p, (unsigned long long)view.len + 1) < 0 || pk_reserve(p, view.len) < 0 ? -1 : 0;  /* 0: None */
            if (!rc) {
                memcpy(p->data + p->len, view.buf, view.len);
                p->len += view.len;
            }
            PyBuffer_Release(&view);
        }
        if (rc || (rc = pk_str(p, PyTuple_GET_ITEM(r, 7))) || (rc = pk_flows(p, PyTuple_GET_ITEM(r, 8))) ||
            (rc = pk_flows(p, PyTuple_GET_ITEM(r, 9))))
            return rc;
        return 0;
    }
    if (type == (PyTypeObject *)argv[3] && PyTuple_GET_SIZE(r) == 4) {  /* Sample */
        PyObject *value = PyTuple_GET_ITEM(r, 3);
        if (!PyFloat_CheckExact(value)) return 1;
        double d = PyFloat_AS_DOUBLE(value);
        unsigned long long bits;
        memcpy(&bits, &d, 8);
        if ((rc = pk_tag(p, P_SAMPLE)) || (rc = pk_str(p, PyTuple_GET_ITEM(r, 1))) ||
            (rc = pk_int(p, PyTuple_GET_ITEM(r, 2), 0)))
            return rc;
        return pk_u64(p, bits);
    }
    if (type == (PyTypeObject *)argv[4] && PyTuple_GET_SIZE(r) == 6) {  /* FlowEnd */
        PyObject *starts = PyTuple_GET_ITEM(r, 5);
        if (!PyBool_Check(starts)) return 1;
        if ((rc = pk_tag(p, P_FLOW_END)) || (rc = pk_layer(p, argv[1], PyTuple_GET_ITEM(r, 1))) ||
            (rc = pk_str(p, PyTuple_GET_ITEM(r, 2))) || (rc = pk_int(p, PyTuple_GET_ITEM(r, 3), 0)) ||
            (rc = pk_str(p, PyTuple_GET_ITEM(r, 4))))
            return rc;
        return pk_tag(p, starts == Py_True);
    }
    PyErr_Format(PyExc_TypeError, "not a record: %R", r);
    return -1;
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
    if (rc == 0) out = PyBytes_FromStringAndSize(p.data ? p.data : "", p.len);
    else if (rc == 1) out = Py_NewRef(Py_None);
    PyMem_Free(p.data);
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
            PyObject *items[10] = {Py_NewRef(argv[1]), up_layer(&u, layers)};
            unsigned long long args_len = 0;
            if (items[1] && (items[2] = up_str(&u)) && (items[3] = up_str(&u)) && (items[4] = up_int(&u, 0)) &&
                (items[5] = up_int(&u, 0)) && up_u64(&u, &args_len) == 0) {
                if (args_len == 0) {
                    items[6] = Py_NewRef(Py_None);
                } else if (args_len - 1 <= (unsigned long long)(u.end - u.at)) {
                    items[6] = PyBytes_FromStringAndSize((const char *)u.at, (Py_ssize_t)(args_len - 1));
                    u.at += args_len - 1;
                } else {
                    PyErr_SetString(PyExc_ValueError, "a packed batch ends early");
                }
                if (items[6] && (items[7] = up_str(&u)) && (items[8] = up_flows(&u))) items[9] = up_flows(&u);
            }
            made = record(argv[3], items, 10);
        } else if (tag == P_SAMPLE) {
            PyObject *items[4] = {Py_NewRef(argv[1])};
            unsigned long long bits;
            if ((items[1] = up_str(&u)) && (items[2] = up_int(&u, 0)) && up_u64(&u, &bits) == 0) {
                double d;
                memcpy(&d, &bits, 8);
                items[3] = PyFloat_FromDouble(d);
            }
            made = record(argv[4], items, 4);
        } else if (tag == P_FLOW_END) {
            PyObject *items[6] = {Py_NewRef(argv[1]), up_layer(&u, layers)};
            unsigned char starts;
            if (items[1] && (items[2] = up_str(&u)) && (items[3] = up_int(&u, 0)) && (items[4] = up_str(&u)) &&
                up_byte(&u, &starts) == 0)
                items[5] = PyBool_FromLong(starts);
            made = record(argv[5], items, 6);
        } else {
            PyErr_SetString(PyExc_ValueError, "bad tag in a packed batch");
        }
        if (!made || PyList_Append(out, made) < 0) Py_CLEAR(out);
        Py_XDECREF(made);
    }
    PyBuffer_Release(&view);
    return out;
}

/* -- chrome_trace._file_by_step: a batch's records filed under their steps --------------------- */

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
    Py_ssize_t n_steps = PyList_GET_SIZE(argv[1]), index = -1;
    long long *starts = PyMem_Calloc(n_steps + 1, sizeof(long long)), low = 0, high = 0;
    if (!buckets || !finishes) goto done;
    if (!starts) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < n_steps; i++) {
        starts[i] = PyLong_AsLongLong(PyList_GET_ITEM(argv[1], i));
        if (starts[i] == -1 && PyErr_Occurred()) goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(records); i++) {
        PyObject *r = PyList_GET_ITEM(records, i);
        PyTypeObject *type = Py_TYPE(r);
        Py_ssize_t at = type == (PyTypeObject *)argv[2] ? 4 : type == (PyTypeObject *)argv[3] ? 2 :
                        type == (PyTypeObject *)argv[4] ? 3 : -1;
        if (at < 0 || PyTuple_GET_SIZE(r) <= at || (at == 3 && PyTuple_GET_SIZE(r) < 6)) {
            PyErr_Format(PyExc_TypeError, "not a record: %R", r);
            goto done;
        }
        int overflow = 0;
        long long ts = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(r, at), &overflow);
        if (overflow) PyErr_SetString(PyExc_OverflowError, "a record past 2**63 ns");
        if (PyErr_Occurred()) goto done;
        if (index < 0 || !(ts >= low && ts < high)) {  /* records come in runs of one step */
            Py_ssize_t lo = 0, hi = n_steps;
            while (lo < hi) {  /* bisect_right */
                Py_ssize_t mid = (lo + hi) / 2;
                if (ts < starts[mid]) hi = mid; else lo = mid + 1;
            }
            index = lo > 0 ? lo - 1 : 0;
            low = index ? starts[index] : LLONG_MIN;
            high = index + 1 < n_steps ? starts[index + 1] : LLONG_MAX;
            Py_XSETREF(number, PyLong_FromSsize_t(index));
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
        if (at == 3) {  /* a FlowEnd: an arrow that ends here is looked for from earlier steps */
            int starts_here = PyObject_IsTrue(PyTuple_GET_ITEM(r, 5));
            if (starts_here < 0) goto done;
            if (starts_here) continue;
            Py_hash_t h = PyObject_Hash(PyTuple_GET_ITEM(r, 4));
            PyObject *hashes = h == -1 ? NULL : PyDict_GetItemWithError(finishes, number);
            if (h == -1 || (!hashes && PyErr_Occurred())) goto done;
            if (!hashes) {
                if (!(hashes = PyList_New(0))) goto done;
                int rc = PyDict_SetItem(finishes, number, hashes);
                Py_DECREF(hashes);
                if (rc < 0) goto done;
            }
            PyObject *value = PyLong_FromSsize_t(h);
            int rc = value ? PyList_Append(hashes, value) : -1;
            Py_XDECREF(value);
            if (rc < 0) goto done;
        }
    }
    result = PyTuple_Pack(2, buckets, finishes);
done:
    PyMem_Free(starts);
    Py_XDECREF(number); Py_XDECREF(buckets); Py_XDECREF(finishes);
    return result;
}

/* -- chrome_trace._bind_ends: the slice each flow end binds to ----------------------------------- */

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
    *start = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(s, 4), &overflow);
    if (!overflow && !(*start == -1 && PyErr_Occurred()))
        *dur = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(s, 5), &overflow);
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

/* enclosing(slices, ends) -> [index or None]: for each flow end, the innermost slice of its lane
 * (layer, lane) that holds its time, among the 65 that start last at or before it. */
static PyObject *enclosing(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 2 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "enclosing(slices: list, ends: list)");
        return NULL;
    }
    PyObject *slices = argv[0], *ends = argv[1], *lanes = PyDict_New(), *out = NULL;
    Py_ssize_t n_lanes = 0, *sizes = NULL, *caps = NULL;
    Member **members = NULL;
    if (!lanes) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ends); i++) {  /* the lanes that have ends */
        PyObject *end = PyList_GET_ITEM(ends, i);
        if (!PyTuple_Check(end) || PyTuple_GET_SIZE(end) < 6) { PyErr_SetString(PyExc_TypeError, "not a FlowEnd"); goto done; }
        if (lane_number(lanes, PyTuple_GET_ITEM(end, 1), PyTuple_GET_ITEM(end, 2), &n_lanes) == -2) goto done;
    }
    members = PyMem_Calloc(n_lanes + 1, sizeof(Member *));
    sizes = PyMem_Calloc(n_lanes + 1, sizeof(Py_ssize_t));
    caps = PyMem_Calloc(n_lanes + 1, sizeof(Py_ssize_t));
    if (!members || !sizes || !caps) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(slices); i++) {  /* their slices */
        PyObject *s = PyList_GET_ITEM(slices, i);
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) < 6) { PyErr_SetString(PyExc_TypeError, "not a Slice"); goto done; }
        Py_ssize_t lane = lane_number(lanes, PyTuple_GET_ITEM(s, 1), PyTuple_GET_ITEM(s, 2), NULL);
        if (lane == -2) goto done;
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
    if (!(out = PyList_New(PyList_GET_SIZE(ends)))) goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ends); i++) {
        PyObject *end = PyList_GET_ITEM(ends, i), *found = Py_None;
        Py_ssize_t lane = lane_number(lanes, PyTuple_GET_ITEM(end, 1), PyTuple_GET_ITEM(end, 2), NULL);
        int overflow = 0;
        long long ts = lane >= 0 ? PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(end, 3), &overflow) : 0;
        if (overflow) PyErr_SetString(PyExc_OverflowError, "a flow end past 2**63 ns");
        if (lane < 0 || PyErr_Occurred()) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "a flow end's lane was not numbered");
            Py_CLEAR(out);
            goto done;
        }
        Py_ssize_t low = 0, high = sizes[lane];
        Member *m = members[lane];
        while (low < high) {  /* bisect_right over the starts */
            Py_ssize_t mid = (low + high) / 2;
            if (ts < m[mid].start) high = mid; else low = mid + 1;
        }
        for (Py_ssize_t j = low - 1; j >= 0 && j >= low - 1 - 64; j--) {
            if (m[j].start <= ts && ts <= m[j].start - m[j].neg_dur) {
                found = PyLong_FromSsize_t(m[j].index);
                if (!found) { Py_CLEAR(out); goto done; }
                break;
            }
        }
        if (found == Py_None) Py_INCREF(found);
        PyList_SET_ITEM(out, i, found);
    }
done:
    if (members)
        for (Py_ssize_t lane = 0; lane < n_lanes; lane++) PyMem_Free(members[lane]);
    PyMem_Free(members); PyMem_Free(sizes); PyMem_Free(caps);
    Py_DECREF(lanes);
    return out;
}

/* bind_ends(slices, ends) -> (arrows, unstarted, last_starts), as chrome_trace._bind_ends says */
typedef struct { long long ts; Py_ssize_t slice; } Start;

static int start_order(const void *a, const void *b) {
    const Start *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return (x->slice > y->slice) - (x->slice < y->slice);
}

static PyObject *bind_ends(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    PyObject *found = enclosing(module, argv, argc);  /* checks the arguments too */
    if (!found) return NULL;
    PyObject *ends = argv[1], *groups = PyDict_New(), *keys = PyList_New(0);
    PyObject *arrows = PyList_New(0), *unstarted = PyList_New(0), *last_starts = PyDict_New(), *result = NULL;
    Py_ssize_t n = PyList_GET_SIZE(ends), n_groups = 0, *sizes = NULL, *caps = NULL;
    Start **starts = PyMem_Calloc(n + 1, sizeof(Start *));
    sizes = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    caps = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    if (!groups || !keys || !arrows || !unstarted || !last_starts) goto done;
    if (!starts || !sizes || !caps) { PyErr_NoMemory(); goto done; }
    for (int pass = 0; pass < 2; pass++) {  /* the starts of each key, then each finish */
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *end = PyList_GET_ITEM(ends, i), *at = PyList_GET_ITEM(found, i);
            if (at == Py_None) continue;
            int starts_here = PyObject_IsTrue(PyTuple_GET_ITEM(end, 5));
            if (starts_here < 0) goto done;
            if (starts_here != (pass == 0)) continue;
            PyObject *key = PyTuple_GET_ITEM(end, 4), *group = PyDict_GetItemWithError(groups, key);
            if (!group && PyErr_Occurred()) goto done;
            Py_ssize_t g = group ? PyLong_AsSsize_t(group) : -1, slice = PyLong_AsSsize_t(at);
            int overflow = 0;
            long long ts = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(end, 3), &overflow);
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
                starts[g][sizes[g]++] = (Start){ts, slice};
                continue;
            }
            Py_ssize_t low = 0, high = g < 0 ? 0 : sizes[g];
            while (low < high) {  /* the starts at or before the finish */
                Py_ssize_t mid = (low + high) / 2;
                if (ts < starts[g][mid].ts) high = mid; else low = mid + 1;
            }
            PyObject *item;
            if (low > 0)
                item = Py_BuildValue("(OnO)", key, starts[g][low - 1].slice, at);
            else if (g >= 0)
                item = Py_BuildValue("(OOn)", key, at, starts[g][0].slice);
            else
                item = Py_BuildValue("(OOO)", key, at, Py_None);
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
    }
    result = PyTuple_Pack(3, arrows, unstarted, last_starts);
done:
    for (Py_ssize_t g = 0; starts && g < n_groups; g++) PyMem_Free(starts[g]);
    PyMem_Free(starts); PyMem_Free(sizes); PyMem_Free(caps);
    Py_DECREF(found); Py_XDECREF(groups); Py_XDECREF(keys);
    Py_XDECREF(arrows); Py_XDECREF(unstarted); Py_XDECREF(last_starts);
    return result;
}

/* -- chrome_trace._Linker._arrow: one arrow between two slices ------------------------------ */

/* BLAKE2b (RFC 7693) with an 8-byte digest and no key: hashlib.blake2b(data, digest_size=8), read
 * as a little-endian int, is what chrome_trace.flow_id gives an arrow. */
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

/* flow_id(rank, key, k) -> chrome_trace.flow_id's int, for a key already made into text */
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

/* slice.with_flows(slice.flows_out + (flow,) or slice.flows_in + (flow,)): a new Slice */
static PyObject *with_flow(PyObject *slice, Py_ssize_t at, PyObject *flow) {
    if (!PyTuple_Check(slice) || PyTuple_GET_SIZE(slice) != 10 || !PyTuple_Check(PyTuple_GET_ITEM(slice, at))) {
        PyErr_Format(PyExc_TypeError, "not a Slice: %R", slice);
        return NULL;
    }
    PyObject *old = PyTuple_GET_ITEM(slice, at), *flows = PyTuple_New(PyTuple_GET_SIZE(old) + 1);
    PyObject *made = flows ? Py_TYPE(slice)->tp_alloc(Py_TYPE(slice), 10) : NULL;
    if (!made) { Py_XDECREF(flows); return NULL; }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(old); i++) {
        Py_INCREF(PyTuple_GET_ITEM(old, i));
        PyTuple_SET_ITEM(flows, i, PyTuple_GET_ITEM(old, i));
    }
    Py_INCREF(flow);
    PyTuple_SET_ITEM(flows, PyTuple_GET_SIZE(old), flow);
    for (Py_ssize_t i = 0; i < 10; i++) {
        PyObject *item = i == at ? flows : PyTuple_GET_ITEM(slice, i);
        if (i != at) Py_INCREF(item);
        PyTuple_SET_ITEM(made, i, item);
    }
    return made;
}

/* arrow(source, first, target, last, key, k, rank) -> k + 1, or k if the arrow would end before
 * it starts (not made): source[first] gets the arrow out and target[last] the arrow in, with
 * the id flow_id(rank, f"{key}@{source[first].start_ns}", k), as _Linker._arrow makes them. */
static PyObject *arrow(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 7 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[2]) || !PyUnicode_Check(argv[4])) {
        PyErr_SetString(PyExc_TypeError, "arrow(source: list, first, target: list, last, key: str, k, rank)");
        return NULL;
    }
    PyObject *source = argv[0], *target = argv[2];
    Py_ssize_t first = PyLong_AsSsize_t(argv[1]), last = PyLong_AsSsize_t(argv[3]);
    long long k = PyLong_AsLongLong(argv[5]), rank = PyLong_AsLongLong(argv[6]);
    if (PyErr_Occurred()) return NULL;
    if (first < 0 || first >= PyList_GET_SIZE(source) || last < 0 || last >= PyList_GET_SIZE(target)) {
        PyErr_SetString(PyExc_IndexError, "arrow: no such slice");
        return NULL;
    }
    PyObject *begin = PyList_GET_ITEM(source, first), *end = PyList_GET_ITEM(target, last);
    if (!PyTuple_Check(begin) || PyTuple_GET_SIZE(begin) != 10 || !PyTuple_Check(end) || PyTuple_GET_SIZE(end) != 10) {
        PyErr_SetString(PyExc_TypeError, "arrow: not a Slice");
        return NULL;
    }
    long long begin_ns = 0, end_ns = 0, dur = 0;
    if (times_of(PyList_GET_ITEM(source, first), &begin_ns, &dur) < 0) return NULL;
    if (times_of(PyList_GET_ITEM(target, last), &end_ns, &dur) < 0) return NULL;
    if (end_ns < begin_ns) return PyLong_FromLongLong(k);
    Py_ssize_t key_n;
    const char *key = PyUnicode_AsUTF8AndSize(argv[4], &key_n);
    if (!key) return NULL;
    char small[256], *text = small;
    size_t room = (size_t)key_n + 80;  /* the key, three 64-bit ints, their separators and a NUL */
    if (room > sizeof small && !(text = PyMem_Malloc(room))) return PyErr_NoMemory();
    int head = snprintf(text, room, "%lld|", rank);
    memcpy(text + head, key, (size_t)key_n);
    int tail = snprintf(text + head + key_n, room - head - key_n, "@%lld|%lld", begin_ns, k);
    uint64_t id = blake2b_64((const uint8_t *)text, (size_t)head + (size_t)key_n + (size_t)tail);
    if (text != small) PyMem_Free(text);
    PyObject *flow = PyLong_FromUnsignedLongLong(id);
    PyObject *out = flow ? with_flow(PyList_GET_ITEM(source, first), 8, flow) : NULL;
    if (!out) { Py_XDECREF(flow); return NULL; }
    PyList_SetItem(source, first, out);
    PyObject *in = with_flow(PyList_GET_ITEM(target, last), 9, flow);  /* the same slice, if one */
    Py_DECREF(flow);
    if (!in) return NULL;
    PyList_SetItem(target, last, in);
    return PyLong_FromLongLong(k + 1);
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
    {"enclosing", (PyCFunction)(void (*)(void))enclosing, METH_FASTCALL,
     "enclosing(slices, ends) -> for each flow end the index of its slice, or None"},
    {"steps_and_names", (PyCFunction)(void (*)(void))steps_and_names, METH_FASTCALL,
     "steps_and_names(events, first_index) -> ([metadata events], [(index, event) of possible steps])"},
    {"read_events", (PyCFunction)(void (*)(void))read_events, METH_FASTCALL,
     "read_events(events, first_index, out, python, context) -> (metadata events, saw a device event)"},
    {"us_to_ns", (PyCFunction)(void (*)(void))us_to_ns, METH_FASTCALL,
     "us_to_ns(us, exact) -> int: µs (a number, or a string with at most 3 decimals) as ns"},
    {"by_step", (PyCFunction)(void (*)(void))by_step, METH_FASTCALL,
     "by_step(records, starts, Slice, Sample, FlowEnd) -> ({step: records}, {step: hashes of arrows ending})"},
    {"bind_ends", (PyCFunction)(void (*)(void))bind_ends, METH_FASTCALL,
     "bind_ends(slices, ends) -> (arrows, unstarted, last_starts) of chrome_trace._bind_ends"},
    {"flow_id", (PyCFunction)(void (*)(void))flow_id, METH_FASTCALL,
     "flow_id(text) -> the int of the 8-byte BLAKE2b digest of text (little-endian)"},
    {"arrow", (PyCFunction)(void (*)(void))arrow, METH_FASTCALL,
     "arrow(source, first, target, last, key, k, rank) -> k + 1, or k if the arrow would run backwards"},
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

PyMODINIT_FUNC PyInit__core(void) { return intern_all() < 0 ? NULL : PyModule_Create(&module); }
