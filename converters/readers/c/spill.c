/* spill.StepSpill and spilled_flows in C: a reader of a big file files every record it makes under
 * its step on disk and reads it back when the step is written: two conversions per record, about
 * 2 us each in Python, a fifth of a detail conversion.
 * - spill.StepSpill: records to plain rows and back (rows, records), packed and back (pack, unpack);
 * - spilled_flows.Launched.file: the work of records filed by their launch (launched_work);
 * - spilled_flows.file_by_step: records under their steps (by_step), packed in the same pass
 *   (pack_by_step: spill.StepSpill.add_by_step), and the records read_events makes in the spill
 *   pass packed alike (pack_made_by_step, for chrome_trace.c); the steps later arrows end in
 *   (later_steps: spilled_flows.SpilledFinishes.lasts);
 * - chrome_trace.step_records: records by kind (by_kind).
 * A row is a plain tuple that marshal can write: the record's kind first (its layer's order for a
 * Slice, -1 for a Sample, -2 for a FlowEnd), the rank left out (the reader knows it), raw JSON args
 * as bytes. What comes back is what went in (tests/readers/test_spill.py). */
#include "core.h"

#include <limits.h>
#include <string.h>

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

/* rows(records, orders, Slice, Sample, FlowEnd) -> the records as rows (see above), which ``records``
 * makes back into the records (the rule: spill.StepSpill gives back what it filed) */
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

/* records(rows, rank, layers, Slice, Sample, FlowEnd) -> the records ``rows`` was given */
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

/* pack(records, orders, Slice, Sample, FlowEnd) -> bytes, or None: see above; unpack gives the records
 * back (the rule: spill.StepSpill gives back what it filed) */
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

/* by_window(records, window_ns, Slice, Sample, FlowEnd) -> {window: [records]}: each record under
 * its start // window_ns (floor division, as Python's), the windows in the order first met, each
 * one's records in order (spill.ByTime.add's filing, its rule: tests/readers/test_spill.py) */
static PyObject *by_window(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    long long width = argc == 5 && PyLong_Check(argv[1]) ? PyLong_AsLongLong(argv[1]) : 0;
    if (argc != 5 || !PyList_CheckExact(argv[0]) || width <= 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "by_window(records: list, window_ns: int > 0, Slice, Sample, FlowEnd)");
        return NULL;
    }
    PyObject *buckets = PyDict_New(), *bucket = NULL, *number = NULL;
    long long last = 0;
    if (!buckets) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(argv[0]); i++) {
        PyObject *r = PyList_GET_ITEM(argv[0], i);
        long long ts;
        int flow_end;
        if (record_start(r, argv + 2, &ts, &flow_end) < 0) goto fail;
        long long window = ts / width - (ts % width < 0);
        if (!bucket || window != last) {  /* records come in runs of one window: one lookup a run */
            Py_XSETREF(number, PyLong_FromLongLong(window));
            if (!number) goto fail;
            if (!(bucket = PyDict_GetItemWithError(buckets, number))) {  /* borrowed */
                if (PyErr_Occurred() || !(bucket = PyList_New(0))) goto fail;
                int rc = PyDict_SetItem(buckets, number, bucket);
                Py_DECREF(bucket);
                if (rc < 0) goto fail;
            }
            last = window;
        }
        if (PyList_Append(bucket, r) < 0) goto fail;
    }
    Py_XDECREF(number);
    return buckets;
fail:
    Py_XDECREF(number);
    Py_DECREF(buckets);
    return NULL;
}

/* by_step(records, starts, Slice, Sample, FlowEnd) -> ({step: [records]}, {step: [hash(key)]}):
 * each record under the last step that starts at or before it (the first step if none), and
 * the hashes of the keys of the arrows that end there: spilled_flows.file_by_step's filing (its rule:
 * bisect_right(starts, start) - 1, the first step if none). */
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

/* launched_work(records, Slice, FlowEnd, comm_op, stream, computes, is_compute) -> (first, last,
 * hashes): of the records filed under the step that launched them, the first start and last end of
 * its compute and communication (None, None where none: spilled_flows.works, is_compute(task_type)
 * asked once per type and kept in the dict ``computes``), and the hashes of the keys of the arrows
 * that end there as native 64-bit ints (bytes): spilled_flows.Launched.file's (its rule:
 * spilled_flows.launched_work_by_rule; tests/readers/test_spill.py holds this to it). */
static PyObject *launched_work(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 7 || !PyList_CheckExact(argv[0]) || !PyDict_CheckExact(argv[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "launched_work(records: list, Slice, FlowEnd, comm_op, stream, computes: dict, is_compute)");
        return NULL;
    }
    PyObject *records = argv[0], *comm_op = argv[3], *stream = argv[4], *computes = argv[5];
    PyTypeObject *slice = (PyTypeObject *)argv[1], *flow_end = (PyTypeObject *)argv[2];
    long long first = LLONG_MAX, last = LLONG_MIN;
    int any = 0;
    Buf hashes = {0};
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(records); i++) {
        PyObject *r = PyList_GET_ITEM(records, i);
        if (Py_TYPE(r) == flow_end && PyTuple_GET_SIZE(r) >= FLOW_END_FIELDS) {
            Py_hash_t h;
            int ends = ending_hash(r, &h);
            if (ends < 0) goto done;
            if (ends) {
                int64_t value = h;
                if (buf_put(&hashes, (const char *)&value, sizeof value) < 0) goto done;
            }
            continue;
        }
        if (Py_TYPE(r) != slice || PyTuple_GET_SIZE(r) <= SLICE_TASK_TYPE) {
            PyErr_Format(PyExc_TypeError, "not a Slice or FlowEnd: %R", r);
            goto done;
        }
        PyObject *layer = PyTuple_GET_ITEM(r, SLICE_LAYER);
        int works = layer == comm_op;
        if (!works && layer == stream) {
            PyObject *task = PyTuple_GET_ITEM(r, SLICE_TASK_TYPE);
            PyObject *known = PyDict_GetItemWithError(computes, task);  /* borrowed */
            if (!known) {
                if (PyErr_Occurred() || !(known = PyObject_CallOneArg(argv[6], task))) goto done;
                int rc = PyDict_SetItem(computes, task, known);
                Py_DECREF(known);  /* held by the dict */
                if (rc < 0) goto done;
            }
            if ((works = PyObject_IsTrue(known)) < 0) goto done;
        }
        if (!works) continue;
        int overflow = 0;
        long long start = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(r, SLICE_START_NS), &overflow), dur = 0;
        if (!overflow && !(start == -1 && PyErr_Occurred()))
            dur = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(r, SLICE_DUR_NS), &overflow);
        long long end;
        if (overflow || (!PyErr_Occurred() && __builtin_add_overflow(start, dur, &end)))
            PyErr_SetString(PyExc_OverflowError, "a slice past 2**63 ns");
        if (PyErr_Occurred()) goto done;
        if (start < first) first = start;
        if (end > last) last = end;
        any = 1;
    }
    result = any ? Py_BuildValue("(LLy#)", first, last, hashes.data ? hashes.data : "", (Py_ssize_t)hashes.len)
                 : Py_BuildValue("(OOy#)", Py_None, Py_None, hashes.data ? hashes.data : "", (Py_ssize_t)hashes.len);
done:
    PyMem_Free(hashes.data);
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

/* chrome_trace.c's records: see core.h. As pack_by_step's loop, for records held as Made */
PyObject *pack_made_by_step(const Made *made, Py_ssize_t n, PyObject *by_step, PyObject *const *types) {
    PyObject *orders = PyTuple_GET_ITEM(by_step, BY_STEP_ORDERS), *result = NULL;
    PyObject *const argv[5] = {NULL, orders, types[0], types[1], types[2]};  /* pk_record's */
    StepPack sp;
    int rc = 0;
    if (sp_open(&sp, PyTuple_GET_ITEM(by_step, BY_STEP_STARTS)) < 0) goto done;
    for (Py_ssize_t i = 0; !rc && i < n; i++) {
        const Made *m = &made[i];
        long long ts = m->start;
        int flow_end = m->tag == P_FLOW_END, ends = 0;
        if ((!m->tag && record_start(m->record, argv + 2, &ts, &flow_end) < 0) || sp_at(&sp, ts) < 0) goto done;
        rc = m->tag ? pk_made(sp.p, m, orders) : pk_record(sp.p, m->record, argv);
        if (rc || !flow_end) continue;
        Py_hash_t h = 0;
        if (!m->tag) ends = ending_hash(m->record, &h);
        else if ((ends = !m->starts) && (h = PyObject_Hash(m->name)) == -1) goto done;
        if (ends < 0 || (ends && sp_ending(&sp, h) < 0)) goto done;
    }
    if (rc < 0 || (!rc && end_run(&sp, sp.steps.index) < 0)) goto done;
    result = Py_NewRef(rc ? Py_None : sp.runs);
done:
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


PyMethodDef SPILL_METHODS[] = {
    {"by_kind", (PyCFunction)(void (*)(void))by_kind, METH_FASTCALL,
     "by_kind(records, Slice, Sample, FlowEnd) -> (slices, samples, flow ends)"},
    {"pack_by_step", (PyCFunction)(void (*)(void))pack_by_step, METH_FASTCALL,
     "pack_by_step(records, starts, orders, Slice, Sample, FlowEnd) -> [(step, packed, hashes)] runs, or None"},
    {"later_steps", (PyCFunction)(void (*)(void))later_steps, METH_FASTCALL,
     "later_steps(keys, loaded, index) -> {key: the last step after index whose hashes hold hash(key)}"},
    {"launched_work", (PyCFunction)(void (*)(void))launched_work, METH_FASTCALL,
     "launched_work(records, Slice, FlowEnd, comm_op, stream, computes, is_compute) -> (first, last, hashes)"},
    {"by_window", (PyCFunction)(void (*)(void))by_window, METH_FASTCALL,
     "by_window(records, window_ns, Slice, Sample, FlowEnd) -> {start // window_ns: records}"},
    {"by_step", (PyCFunction)(void (*)(void))by_step, METH_FASTCALL,
     "by_step(records, starts, Slice, Sample, FlowEnd) -> ({step: records}, {step: hashes of arrows ending})"},
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
