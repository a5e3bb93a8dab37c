/* xplane._events' decoding of a line's events in C: each XEvent's wire bytes (xplane.proto) read as
 * protobuf reads them, its stats named as xplane._named_stats names them (or only the key stats, as
 * _events takes them), with no message object per event and stat. Anything the wire holds that this
 * reader does not take as protobuf would (a varint past 10 bytes, a group, a known field of another
 * wire type, a string that is not UTF-8, a field running past its event) gives None for the batch,
 * which protobuf then decodes, saying what is wrong (xplane._by_protobuf, the rule). */
#include "core.h"

#include <string.h>

typedef struct { const uint8_t *p, *end; } Wire;

/* A varint as protobuf reads one (at most 10 bytes): 1, or 0 where it is cut or longer */
static int varint(Wire *w, uint64_t *value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70 && w->p < w->end; shift += 7) {
        uint8_t byte = *w->p++;
        if (shift == 63 && byte > 1) return 0;
        v |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *value = v;
            return 1;
        }
    }
    return 0;
}

/* A field's key: 1, or 0 where protobuf refuses it (a field number of 0, past 32 bits) */
static int key_of(Wire *w, unsigned *number, unsigned *kind) {
    uint64_t key;
    if (!varint(w, &key) || key >> 32 || !(key >> 3)) return 0;
    *number = (unsigned)(key >> 3);
    *kind = key & 7;
    return 1;
}

/* Past a field of wire type ``kind`` whose key was read: 1, or 0 (a group, or cut) */
static int skip(Wire *w, unsigned kind) {
    uint64_t n;
    switch (kind) {
    case 0: return varint(w, &n);
    case 1: n = 8; break;
    case 5: n = 4; break;
    case 2: if (!varint(w, &n)) return 0; break;
    default: return 0;
    }
    if (n > (uint64_t)(w->end - w->p)) return 0;
    w->p += n;
    return 1;
}

enum { V_NONE, V_DOUBLE = 2, V_UINT64, V_INT64, V_STR, V_BYTES, V_REF };  /* XStat's value, by field number */

typedef struct {
    int64_t id;
    int kind;
    uint64_t bits;  /* a number's; a double's as its bits */
    PyObject *str;  /* V_STR's text */
} Stat;

/* One XStat from its bytes into ``s``: 1, 0 to leave the batch to protobuf, -1 on error */
static int read_stat(Wire w, Stat *s) {
    memset(s, 0, sizeof *s);
    while (w.p < w.end) {
        uint64_t v;
        unsigned number, kind;
        if (!key_of(&w, &number, &kind)) return 0;
        if (number >= 1 && number <= 7 && kind != (number == 2 ? 1u : number >= 5 && number <= 6 ? 2u : 0u))
            return 0;  /* a known field of another wire type */
        if (number == 2) {
            if (w.end - w.p < 8) return 0;
            memcpy(&s->bits, w.p, 8);  /* little-endian, as protobuf's fixed64 (x86, arm64) */
            w.p += 8;
            s->kind = V_DOUBLE;
        } else if (number == 5 || number == 6) {
            if (!varint(&w, &v) || v > (uint64_t)(w.end - w.p)) return 0;
            if (number == 5) {  /* proto3 strings are UTF-8: protobuf refuses the message otherwise */
                PyObject *text = PyUnicode_DecodeUTF8((const char *)w.p, (Py_ssize_t)v, NULL);
                if (!text) {
                    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -1;
                    PyErr_Clear();
                    return 0;
                }
                Py_XSETREF(s->str, text);
            }
            w.p += v;
            s->kind = (int)number;
        } else if (number >= 1 && number <= 7) {
            if (!varint(&w, &v)) return 0;
            if (number == 1) s->id = (int64_t)v;
            else {
                s->bits = v;
                s->kind = (int)number;
            }
        } else if (!skip(&w, kind)) {
            return 0;
        }
    }
    return 1;
}

static PyObject *stat_key(PyObject *names, int64_t id) {
    PyObject *number = PyLong_FromLongLong(id), *key = NULL;
    if (!number) return NULL;
    key = PyDict_GetItemWithError(names, number);
    key = key ? Py_NewRef(key) : PyErr_Occurred() ? NULL : PyObject_Str(number);
    Py_DECREF(number);
    return key;
}

/* A stat's value as _named_stats takes it (a ref named by ``names`` where it names it) */
static PyObject *stat_value(const Stat *s, PyObject *names) {
    switch (s->kind) {
    case V_DOUBLE: {
        double d;
        memcpy(&d, &s->bits, 8);
        return PyFloat_FromDouble(d);
    }
    case V_UINT64: return PyLong_FromUnsignedLongLong(s->bits);
    case V_INT64: return PyLong_FromLongLong((int64_t)s->bits);
    case V_STR: return Py_NewRef(s->str);
    default: {  /* V_REF */
        PyObject *ref = PyLong_FromUnsignedLongLong(s->bits), *named;
        if (!ref) return NULL;
        named = PyDict_GetItemWithError(names, ref);
        if (named) Py_SETREF(ref, Py_NewRef(named));
        return named || !PyErr_Occurred() ? ref : (Py_DECREF(ref), NULL);
    }
    }
}

/* Adds a stat to ``stats`` as _named_stats does (``keys`` NULL), or, with ``keys``, as _events' key
 * stats: by its name in ``keys`` where it is one, an int or None. 0, or -1 on error */
static int add_stat(PyObject *stats, const Stat *s, PyObject *names, PyObject *keys) {
    PyObject *key = NULL, *value = NULL;
    int rc = -1;
    if (keys) {
        PyObject *id = PyLong_FromLongLong(s->id);
        if (!id) return -1;
        key = PyDict_GetItemWithError(keys, id);
        Py_DECREF(id);
        if (!key) return PyErr_Occurred() ? -1 : 0;
        Py_INCREF(key);
        value = s->kind == V_UINT64 ? PyLong_FromUnsignedLongLong(s->bits)
              : s->kind == V_INT64 ? PyLong_FromLongLong((int64_t)s->bits) : Py_NewRef(Py_None);
    } else {
        if (s->kind == V_NONE || s->kind == V_BYTES) return 0;
        if (!(key = stat_key(names, s->id))) return -1;
        value = stat_value(s, names);
    }
    if (value) rc = PyDict_SetItem(stats, key, value);
    Py_XDECREF(key);
    Py_XDECREF(value);
    return rc;
}

/* One XEvent: (metadata_id, counted, offset_ps, duration_ps, stats, raw), None to leave the batch
 * to protobuf, or NULL on error */
static PyObject *read_event(PyObject *raw, PyObject *names, PyObject *keys) {
    char *data;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(raw, &data, &n) < 0) return NULL;
    Wire w = {(const uint8_t *)data, (const uint8_t *)data + n};
    int64_t id = 0, offset = 0, duration = 0;
    int counted = 0, ok = 1;
    PyObject *stats = PyDict_New();
    if (!stats) return NULL;
    while (ok && w.p < w.end) {
        uint64_t v;
        unsigned number, kind;
        if (!(ok = key_of(&w, &number, &kind))) break;
        if (number == 4 && kind == 2) {
            Stat s;
            if (!(ok = varint(&w, &v) && v <= (uint64_t)(w.end - w.p))) break;
            int read = read_stat((Wire){w.p, w.p + v}, &s);
            w.p += v;
            if (read < 0 || (read > 0 && add_stat(stats, &s, names, keys) < 0)) {
                Py_XDECREF(s.str);
                Py_DECREF(stats);
                return NULL;
            }
            Py_XDECREF(s.str);
            ok = read;
        } else if (number >= 1 && number <= 5) {
            if (!(ok = kind == 0 && varint(&w, &v))) break;
            if (number == 1) id = (int64_t)v;
            else if (number == 2) offset = (int64_t)v, counted = 0;
            else if (number == 3) duration = (int64_t)v;
            else if (number == 5) counted = 1;
            else ok = 0;  /* field 4 of another wire type */
        } else {
            ok = skip(&w, kind);
        }
    }
    if (!ok) {
        Py_DECREF(stats);
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(LOLLNO)", (long long)id, counted ? Py_True : Py_False, (long long)(counted ? 0 : offset),
                         (long long)duration, stats, raw);
}

/* xevents(events, stat_names, keys) -> [(metadata_id, counted, offset_ps, duration_ps, stats, raw)]
 * or None: xplane._by_protobuf of a batch of XEvents' bytes, in C */
static PyObject *xevents(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 3 || !PyDict_Check(argv[1]) || (argv[2] != Py_None && !PyDict_Check(argv[2]))) {
        PyErr_SetString(PyExc_TypeError, "xevents(events, stat_names: dict, keys: dict | None)");
        return NULL;
    }
    PyObject *keys = argv[2] == Py_None ? NULL : argv[2];
    PyObject *events = PySequence_Fast(argv[0], "xevents: a sequence of bytes");
    if (!events) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(events);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *event = read_event(PySequence_Fast_GET_ITEM(events, i), argv[1], keys);
        if (!event || event == Py_None) {
            Py_CLEAR(out);
            out = event;
            break;
        }
        PyList_SET_ITEM(out, i, event);
    }
    Py_DECREF(events);
    return out;
}

/* -- a line's fields a piece of it at a time (xplane._line_pieces) ------------------------------- */

#define LINE_EVENTS 4  /* XLine's events */

/* A varint in a piece of a line: 1, 0 where protobuf refuses it (past 10 bytes), -1 where the
 * piece ends inside it */
static int piece_varint(Wire *w, uint64_t *value) {
    const uint8_t *start = w->p;
    int rc = varint(w, value);
    if (!rc && w->p >= w->end && w->p - start < 10) return -1;
    return rc;
}

/* line_fields(piece, at, most) -> (events, other fields' wire, next) | None: the whole fields of a
 * piece of an XLine's wire from ``at``: each event's bytes (at most ``most`` of them), the wire of
 * every other field met (key and value, as they came), and where the first field not taken begins
 * (one the piece cuts, or past ``most`` events). None where the wire is one protobuf may read
 * otherwise (a field number 0, a group, events of another wire type, a varint past 10 bytes): the
 * line is then protobuf's to decode, as a whole (xplane._lines). */
static PyObject *line_fields(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    Py_ssize_t at = argc == 3 ? PyLong_AsSsize_t(argv[1]) : -1, most = argc == 3 ? PyLong_AsSsize_t(argv[2]) : -1;
    if (argc != 3 || at < 0 || most < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "line_fields(piece, at >= 0, most >= 0)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(argv[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *base = view.buf;
    Wire w = {base + (at < view.len ? at : view.len), base + view.len};
    PyObject *events = PyList_New(0), *result = NULL;
    Buf others = {0};
    int refused = 0;
    while (events && w.p < w.end && PyList_GET_SIZE(events) < most) {
        const uint8_t *field = w.p;
        uint64_t key, n = 0;
        int rc = piece_varint(&w, &key);
        if (rc < 0) { w.p = field; break; }
        if (!rc || key >> 32 || !(key >> 3)) { refused = 1; break; }
        unsigned number = (unsigned)(key >> 3), kind = key & 7;
        if (kind == 0) {
            rc = piece_varint(&w, &n);
        } else if (kind == 1 || kind == 5) {
            n = kind == 1 ? 8 : 4;
            rc = 1;
        } else if (kind == 2) {
            rc = piece_varint(&w, &n);
        } else {
            refused = 1;  /* a group, or no wire type */
            break;
        }
        if (rc < 0) { w.p = field; break; }
        if (!rc || (number == LINE_EVENTS && kind != 2)) { refused = 1; break; }
        if (kind != 0 && n > (uint64_t)(w.end - w.p)) { w.p = field; break; }  /* cut by the piece */
        const uint8_t *value = w.p;
        if (kind != 0) w.p += n;
        if (number == LINE_EVENTS) {
            PyObject *event = PyBytes_FromStringAndSize((const char *)value, (Py_ssize_t)n);
            if (!event || PyList_Append(events, event) < 0) Py_CLEAR(events);
            Py_XDECREF(event);
        } else if (buf_put(&others, (const char *)field, w.p - field) < 0) {
            Py_CLEAR(events);
        }
    }
    if (events && !refused) {
        PyObject *wire = PyBytes_FromStringAndSize(others.data ? others.data : "", others.len);
        result = wire ? Py_BuildValue("(NNn)", events, wire, (Py_ssize_t)(w.p - base)) : NULL;
        events = NULL;
    } else if (events) {
        result = Py_NewRef(Py_None);
    }
    Py_XDECREF(events);
    PyMem_Free(others.data);
    PyBuffer_Release(&view);
    return result;
}

/* -- a rank's launches by correlation id (xplane.read's per-launch bookkeeping) --------------------
 * Launches(): each correlation id's kernel count and its launch's host time, in an open-addressed
 * table of 24 bytes a slot, at most two thirds full: a Counter and a dict of Python ints held ~190
 * bytes a launch (a long capture has millions). The rule: a Counter of kernels and a dict of times
 * (tests/readers/test_xplane.py). */

typedef struct { uint64_t key; int64_t at; uint32_t count; uint8_t used, negative, launched; } Launch;
typedef struct { PyObject_HEAD Launch *slots; size_t cap, n; } Launches;

/* An id as its 64 bits and whether it is negative (XStat's ints: int64 or uint64): 0, or -1 */
static int launch_key(PyObject *id, uint64_t *key, uint8_t *negative) {
    if (!PyLong_Check(id)) {
        PyErr_SetString(PyExc_TypeError, "Launches: a correlation id is an int");
        return -1;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(id, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    *negative = !overflow && v < 0;
    if (!overflow) {
        *key = (uint64_t)v;
        return 0;
    }
    *key = overflow > 0 ? PyLong_AsUnsignedLongLong(id) : 0;
    if (overflow < 0 || (*key == (uint64_t)-1 && PyErr_Occurred())) {
        PyErr_Clear();
        PyErr_SetString(PyExc_OverflowError, "Launches: a correlation id past 64 bits");
        return -1;
    }
    return 0;
}

static size_t launch_slot(uint64_t key, uint8_t negative, size_t mask) {
    uint64_t x = key ^ negative;  /* splitmix64's finaliser: ids come in runs */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return (size_t)(x ^ (x >> 31)) & mask;
}

/* The id's entry, or NULL (none, or, with ``add``, an error set) */
static Launch *launch_of(Launches *t, PyObject *id, int add) {
    uint64_t key;
    uint8_t negative;
    if (launch_key(id, &key, &negative) < 0) return NULL;
    if (add && (t->n + 1) * 3 > t->cap * 2) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        Launch *slots = PyMem_Calloc(cap, sizeof(Launch));
        if (!slots) return (Launch *)PyErr_NoMemory();
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->slots[i].used) continue;
            size_t at = launch_slot(t->slots[i].key, t->slots[i].negative, cap - 1);
            while (slots[at].used) at = (at + 1) & (cap - 1);
            slots[at] = t->slots[i];
        }
        PyMem_Free(t->slots);
        t->slots = slots;
        t->cap = cap;
    }
    if (!t->cap) return NULL;
    for (size_t at = launch_slot(key, negative, t->cap - 1);; at = (at + 1) & (t->cap - 1)) {
        Launch *slot = &t->slots[at];
        if (slot->used && slot->key == key && slot->negative == negative) return slot;
        if (slot->used) continue;
        if (!add) return NULL;
        *slot = (Launch){.key = key, .negative = negative, .used = 1};
        t->n++;
        return slot;
    }
}

/* kernel(id) -> k: the id's kernels counted so far (this one the k-th), then one more */
static PyObject *launches_kernel(Launches *t, PyObject *id) {
    Launch *slot = launch_of(t, id, 1);
    return slot ? PyLong_FromUnsignedLong(slot->count++) : NULL;
}

/* count(id) -> the id's kernels (0: none) */
static PyObject *launches_count(Launches *t, PyObject *id) {
    Launch *slot = launch_of(t, id, 0);
    return slot ? PyLong_FromUnsignedLong(slot->count) : PyErr_Occurred() ? NULL : PyLong_FromLong(0);
}

/* launch(id, at) -> whether the id ran kernels: then its launch is at ``at`` (the last one said) */
static PyObject *launches_launch(Launches *t, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 2) {
        PyErr_SetString(PyExc_TypeError, "launch(id, at_ns)");
        return NULL;
    }
    long long at = PyLong_AsLongLong(argv[1]);
    if (at == -1 && PyErr_Occurred()) return NULL;
    Launch *slot = launch_of(t, argv[0], 0);
    if (!slot) return PyErr_Occurred() ? NULL : Py_NewRef(Py_False);
    slot->at = at;
    slot->launched = 1;
    return Py_NewRef(Py_True);
}

/* launched_at(id) -> its launch's time, or None where none was said */
static PyObject *launches_at(Launches *t, PyObject *id) {
    Launch *slot = launch_of(t, id, 0);
    if (slot && slot->launched) return PyLong_FromLongLong(slot->at);
    return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
}

static int launches_contains(PyObject *self, PyObject *id) {
    Launch *slot = launch_of((Launches *)self, id, 0);
    return slot ? slot->count > 0 : PyErr_Occurred() ? -1 : 0;
}

static Py_ssize_t launches_len(PyObject *self) { return (Py_ssize_t)((Launches *)self)->n; }

static void launches_dealloc(PyObject *self) {
    PyMem_Free(((Launches *)self)->slots);
    Py_TYPE(self)->tp_free(self);
}

static PyMethodDef launches_methods[] = {
    {"kernel", (PyCFunction)launches_kernel, METH_O, "kernel(id) -> k: its kernels so far, then one more"},
    {"count", (PyCFunction)launches_count, METH_O, "count(id) -> its kernels (0: none)"},
    {"launch", (PyCFunction)(void (*)(void))launches_launch, METH_FASTCALL,
     "launch(id, at_ns) -> whether it ran kernels (then launched at at_ns)"},
    {"launched_at", (PyCFunction)launches_at, METH_O, "launched_at(id) -> its launch's time, or None"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods launches_sequence = {.sq_length = launches_len, .sq_contains = launches_contains};

static PyTypeObject LaunchesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "converters.readers._core.Launches",
    .tp_basicsize = sizeof(Launches),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Launches(): correlation ids, each with its kernel count and its launch's time",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = launches_dealloc,
    .tp_methods = launches_methods,
    .tp_as_sequence = &launches_sequence,
};

/* -- a batch's events made into records (xplane._device_work, xplane._host_work) -----------------
 * Each routine first times and names every event of the batch as xplane._timed does, and leaves
 * the batch to the rule (None) where one of them needs it (counted without times, past the model's
 * times, no name): before any launch is counted, so a batch is read by one or the other, whole. */

typedef struct { long long start, dur; PyObject *name; } Timed;  /* name borrowed from the names dict */

static long long floor_div_1000(long long v) {
    long long q = v / 1000;
    return v % 1000 < 0 ? q - 1 : q;
}

/* Each decoded event's times and name into ``out``: 1, 0 where the rule is needed, -1 on error */
static int timed_all(PyObject *decoded, PyObject *names, PyObject *base_ns, Timed *out) {
    int overflow;
    long long base = PyLong_AsLongLongAndOverflow(base_ns, &overflow);
    if (base == -1 && PyErr_Occurred()) return -1;
    if (overflow || base <= -TIME_LIMIT_NS || base >= TIME_LIMIT_NS) return 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(decoded); i++) {
        PyObject *event = PyList_GET_ITEM(decoded, i);
        if (!PyTuple_Check(event) || PyTuple_GET_SIZE(event) != 6 || PyTuple_GET_ITEM(event, 1) != Py_False)
            return 0;  /* counted without times: the rule warns */
        long long offset = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(event, 2), &overflow);
        if (overflow) return 0;
        long long duration = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(event, 3), &overflow);
        if (overflow || ((offset == -1 || duration == -1) && PyErr_Occurred())) return PyErr_Occurred() ? -1 : 0;
        long long start = base + floor_div_1000(offset), dur = floor_div_1000(duration);
        if (start <= -TIME_LIMIT_NS || start >= TIME_LIMIT_NS || dur <= -TIME_LIMIT_NS || dur >= TIME_LIMIT_NS)
            return 0;
        PyObject *name = PyDict_GetItemWithError(names, PyTuple_GET_ITEM(event, 0));
        if (!name) return PyErr_Occurred() ? -1 : 0;  /* "event N": the rule names it */
        out[i] = (Timed){start, dur, name};
    }
    return 1;
}

/* common.args.as_json(args) (xplane._json): orjson's text in bytes of its own size; the dict itself
 * where JSON cannot hold it (TypeError). Steals ``args``; NULL on error */
static PyObject *as_json(PyObject *dumps, PyObject *args) {
    if (!args) return NULL;
    PyObject *text = PyObject_CallOneArg(dumps, args);
    if (!text) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) {
            Py_DECREF(args);
            return NULL;
        }
        PyErr_Clear();
        return args;
    }
    Py_DECREF(args);
    PyObject *sized = PyBytes_Check(text) ? PyBytes_FromStringAndSize(PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text))
                                          : Py_NewRef(text);
    Py_DECREF(text);
    return sized;
}

/* The stat names the rules look up per event, interned once (xplane_ready) */
static PyObject *S_CORRELATION_ID, *S_STEP_NUM, *S_STREAM_ARG;

/* An int stat (correlation_id, step_num) of ``stats``, borrowed, or NULL (absent, or no int) */
static PyObject *int_stat(PyObject *stats, PyObject *key) {
    PyObject *found = PyDict_GetItem(stats, key);
    return found && PyLong_Check(found) ? found : NULL;
}

/* out.append(the record of ``type`` made from ``items``, new references, stolen): 0, or -1 */
static int append_record(PyObject *out, PyObject *type, PyObject **items) {
    PyObject *made = record(type, items, SLICE_FIELDS);
    int rc = made ? PyList_Append(out, made) : -1;
    Py_XDECREF(made);
    return rc;
}

/* xplane._copy: MEMCPY or MEMSET (borrowed) by the event's name or stats, NULL for a kernel; -1 sets *bad */
static PyObject *copy_of(PyObject *copies, PyObject *name, PyObject *stats, int *bad) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(copies); i++) {
        PyObject *copy = PyTuple_GET_ITEM(copies, i), *words = PyTuple_GET_ITEM(copy, 1);
        for (Py_ssize_t w = 0; w < PyTuple_GET_SIZE(words); w++) {
            Py_ssize_t starts = PyUnicode_Tailmatch(name, PyTuple_GET_ITEM(words, w), 0, PY_SSIZE_T_MAX, -1);
            if (starts) return starts < 0 ? (*bad = 1, NULL) : PyTuple_GET_ITEM(copy, 0);
        }
        int has = PyDict_Contains(stats, PyTuple_GET_ITEM(copy, 2));
        if (has) return has < 0 ? (*bad = 1, NULL) : PyTuple_GET_ITEM(copy, 0);
    }
    return NULL;
}

/* A kernel's task type as a communication op (xplane._communication), borrowed from the cache; None */
static PyObject *communicates(PyObject *c, PyObject *name) {
    PyObject *cache = PyTuple_GET_ITEM(c, DEVICE_IN_C_COMMUNICATES);
    PyObject *found = PyDict_GetItemWithError(cache, name);
    if (found || PyErr_Occurred()) return found;
    found = PyObject_CallOneArg(PyTuple_GET_ITEM(c, DEVICE_IN_C_LEARN), name);
    if (!found || PyDict_SetItem(cache, name, found) < 0) {
        Py_XDECREF(found);
        return NULL;
    }
    Py_DECREF(found);
    return PyDict_GetItemWithError(cache, name);
}

/* xdevice(decoded, in_c, lane, stream, on_stream, base_ns) -> [Slice] | None: a batch of a GPU's
 * stream line (xplane.DeviceInC), as _device_work's rule makes it (_device_slice, the summary's choice,
 * each kernel's place in its launch, counted in ``launched``); None: the batch is the rule's */
static PyObject *xdevice(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 6 || !PyList_Check(argv[0]) || !PyTuple_Check(argv[1]) || PyTuple_GET_SIZE(argv[1]) != DEVICE_IN_C_FIELDS
        || !PyLong_Check(argv[5])) {
        PyErr_SetString(PyExc_TypeError, "xdevice(decoded: list, in_c: DeviceInC, lane, stream, on_stream, base_ns)");
        return NULL;
    }
    PyObject *decoded = argv[0], *c = argv[1], *lane = argv[2], *stream = argv[3];
    int on_stream = PyObject_IsTrue(argv[4]), detail = PyObject_IsTrue(PyTuple_GET_ITEM(c, DEVICE_IN_C_DETAIL));
    Launches *launched = (Launches *)PyTuple_GET_ITEM(c, DEVICE_IN_C_LAUNCHED);
    if (on_stream < 0 || detail < 0) return NULL;
    if (!PyObject_TypeCheck((PyObject *)launched, &LaunchesType)) {
        PyErr_SetString(PyExc_TypeError, "xdevice: DeviceInC.launched is a Launches");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(decoded);
    Timed *timed = PyMem_Malloc(sizeof(Timed) * (size_t)(n ? n : 1));
    if (!timed) return PyErr_NoMemory();
    int ok = timed_all(decoded, PyTuple_GET_ITEM(c, DEVICE_IN_C_NAMES), argv[5], timed);
    PyObject *out = ok > 0 ? PyList_New(0) : NULL;
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *stats = PyTuple_GET_ITEM(PyList_GET_ITEM(decoded, i), 4), *name = timed[i].name;
        PyObject *layer = PyTuple_GET_ITEM(c, DEVICE_IN_C_STREAM_LAYER), *on = lane, *task;
        int bad = 0;
        if (!PyDict_Check(stats)) goto fail;
        if (!on_stream) task = PyTuple_GET_ITEM(c, DEVICE_IN_C_NOT_COMPUTE);
        else if (!(task = copy_of(PyTuple_GET_ITEM(c, DEVICE_IN_C_COPIES), name, stats, &bad))) {
            if (bad) goto fail;
            task = PyTuple_GET_ITEM(c, DEVICE_IN_C_KERNEL);
            PyObject *comm = communicates(c, name);
            if (!comm) goto fail;
            if (comm != Py_None) {
                task = comm;
                layer = PyTuple_GET_ITEM(c, DEVICE_IN_C_COMM_LAYER);
                on = PyTuple_GET_ITEM(c, DEVICE_IN_C_COMM_LANE);
            }
        }
        if (!detail && layer != PyTuple_GET_ITEM(c, DEVICE_IN_C_COMM_LAYER)) {
            int computes = PySet_Contains(PyTuple_GET_ITEM(c, DEVICE_IN_C_COMPUTES), task);
            if (computes < 0) goto fail;
            if (!computes) continue;  /* a summary keeps what computes and communicates */
        }
        PyObject *args = Py_NewRef(Py_None), *flows = Py_NewRef(EMPTY_TUPLE);
        if (detail) {  /* {"Stream": stream, **stats} */
            PyObject *all = PyDict_New();
            if (all && (PyDict_SetItem(all, S_STREAM_ARG, stream) < 0 || PyDict_Update(all, stats) < 0)) Py_CLEAR(all);
            Py_SETREF(args, as_json(PyTuple_GET_ITEM(c, DEVICE_IN_C_DUMPS), all));
        }
        PyObject *id = int_stat(stats, S_CORRELATION_ID);
        if (id && args) {  /* the k-th kernel of its launch, which ends its k-th arrow */
            Launch *slot = launch_of(launched, id, 1);
            Py_SETREF(flows, slot ? Py_BuildValue("(Ok)", id, (unsigned long)slot->count++) : NULL);
        }
        PyObject *items[SLICE_FIELDS] = {
            Py_NewRef(PyTuple_GET_ITEM(c, DEVICE_IN_C_RANK)), Py_NewRef(layer), Py_NewRef(on), Py_NewRef(name),
            PyLong_FromLongLong(timed[i].start), PyLong_FromLongLong(timed[i].dur), args, Py_NewRef(task), flows,
            Py_NewRef(EMPTY_TUPLE)};
        if (append_record(out, PyTuple_GET_ITEM(c, DEVICE_IN_C_SLICE_TYPE), items) < 0) goto fail;
        continue;
    fail:
        Py_CLEAR(out);
    }
    PyMem_Free(timed);
    if (ok < 0 || (!out && PyErr_Occurred())) return NULL;
    return out ? out : Py_NewRef(Py_None);
}

/* xkernels(decoded, names, base_ns, found) -> True | None: xplane._correlations over a batch of
 * another device's line: each timed event's correlation id counted in ``found`` (a Launches); None,
 * and nothing counted, where the batch is the rule's (_timed) */
static PyObject *xkernels(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 4 || !PyList_Check(argv[0]) || !PyDict_Check(argv[1]) || !PyLong_Check(argv[2])
        || !PyObject_TypeCheck(argv[3], &LaunchesType)) {
        PyErr_SetString(PyExc_TypeError, "xkernels(decoded: list, names: dict, base_ns: int, found: Launches)");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(argv[0]);
    Timed *timed = PyMem_Malloc(sizeof(Timed) * (size_t)(n ? n : 1));
    if (!timed) return PyErr_NoMemory();
    int ok = timed_all(argv[0], argv[1], argv[2], timed);
    PyMem_Free(timed);
    for (Py_ssize_t i = 0; ok > 0 && i < n; i++) {
        PyObject *stats = PyTuple_GET_ITEM(PyList_GET_ITEM(argv[0], i), 4);
        PyObject *id = PyDict_Check(stats) ? int_stat(stats, S_CORRELATION_ID) : NULL;
        Launch *slot = id ? launch_of((Launches *)argv[3], id, 1) : NULL;
        if (id && !slot) return NULL;
        if (slot) slot->count++;
    }
    return ok < 0 ? NULL : Py_NewRef(ok ? Py_True : Py_None);
}

/* The text of a launch's k-th arrow (flows.flow_id's "{rank}|launch:{id}|{k}") digested: 1, or 0 on error */
static int launch_arrow(long long rank, PyObject *id, unsigned long k, uint64_t *arrow) {
    char text[96];
    int overflow, len;
    long long v = PyLong_AsLongLongAndOverflow(id, &overflow);
    if (!overflow) len = snprintf(text, sizeof text, "%lld|launch:%lld|%lu", rank, v, k);
    else if (overflow > 0) len = snprintf(text, sizeof text, "%lld|launch:%llu|%lu", rank, PyLong_AsUnsignedLongLong(id), k);
    else {
        PyErr_SetString(PyExc_OverflowError, "a correlation id past 64 bits");
        return 0;
    }
    if (PyErr_Occurred()) return 0;
    *arrow = blake2b_64((const uint8_t *)text, (size_t)len);
    return 1;
}

/* The arrows of a launch of ``kernels`` kernels: flows.flow_id(rank, f"launch:{id}", k) for each k */
static PyObject *launch_arrows(long long rank, PyObject *id, uint32_t kernels) {
    PyObject *arrows = PyTuple_New(kernels);
    for (uint32_t k = 0; arrows && k < kernels; k++) {
        uint64_t digest;
        PyObject *arrow = launch_arrow(rank, id, k, &digest) ? PyLong_FromUnsignedLongLong(digest) : NULL;
        if (!arrow) Py_CLEAR(arrows);
        else PyTuple_SET_ITEM(arrows, k, arrow);
    }
    return arrows;
}

/* How many of the ``n`` sorted ``starts`` are at or before ``at`` (bisect.bisect_right) */
static Py_ssize_t steps_before(const long long *starts, Py_ssize_t n, long long at) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (at < starts[mid]) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* groups[index].append(made), made stolen (NULL: an error already set): 0, or -1 */
static int group_add(PyObject *groups, Py_ssize_t index, PyObject *made) {
    if (!made) return -1;
    PyObject *key = PyLong_FromSsize_t(index), *group = NULL;
    int rc = -1;
    if (key) {
        group = Py_XNewRef(PyDict_GetItemWithError(groups, key));
        if (!group && !PyErr_Occurred() && (group = PyList_New(0)) && PyDict_SetItem(groups, key, group) < 0)
            Py_CLEAR(group);
    }
    if (group) rc = PyList_Append(group, made);
    Py_XDECREF(group);
    Py_XDECREF(key);
    Py_DECREF(made);
    return rc;
}

/* xfiled(records, starts, launched, rank, arrows) -> {step index: [Slice]}: xplane._Held.by_step's
 * filing of a window of records under the steps starting at ``starts`` (an array of int64): by their
 * start (``launched`` None: host records), or device work by its launch's time where ``launched``
 * holds it (its ``flows_out`` its correlation id and place), which then ends its launch's arrow */
static PyObject *xfiled(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    Py_buffer view;
    if (argc != 5 || !PyList_Check(argv[0]) || (argv[2] != Py_None && !PyObject_TypeCheck(argv[2], &LaunchesType))) {
        PyErr_SetString(PyExc_TypeError, "xfiled(records: list, starts: array('q'), launched: Launches | None, rank, arrows)");
        return NULL;
    }
    if (PyObject_GetBuffer(argv[1], &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (view.itemsize != sizeof(long long) || !view.format || strcmp(view.format, "q") != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "xfiled: starts is an array('q')");
        return NULL;
    }
    const long long *starts = view.buf;
    Py_ssize_t steps = view.len / (Py_ssize_t)sizeof(long long);
    Launches *launched = argv[2] == Py_None ? NULL : (Launches *)argv[2];
    long long rank = PyLong_AsLongLong(argv[3]);
    int arrows = PyObject_IsTrue(argv[4]);
    PyObject *groups = (rank == -1 && PyErr_Occurred()) || arrows < 0 ? NULL : PyDict_New();
    for (Py_ssize_t i = 0; groups && i < PyList_GET_SIZE(argv[0]); i++) {
        PyObject *s = PyList_GET_ITEM(argv[0], i), *made = NULL;
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) != SLICE_FIELDS) {
            PyErr_SetString(PyExc_TypeError, "xfiled: records are Slices");
            Py_CLEAR(groups);
            break;
        }
        long long at = PyLong_AsLongLong(PyTuple_GET_ITEM(s, SLICE_START_NS));
        if (at == -1 && PyErr_Occurred()) {
            Py_CLEAR(groups);
            break;
        }
        if (!launched) {
            made = Py_NewRef(s);
        } else {
            PyObject *flows = PyTuple_GET_ITEM(s, SLICE_FLOWS_OUT), *ends = EMPTY_TUPLE;
            Launch *slot = NULL;
            if (PyTuple_Check(flows) && PyTuple_GET_SIZE(flows) == 2) {
                slot = launch_of(launched, PyTuple_GET_ITEM(flows, 0), 0);
                if (slot && !slot->launched) slot = NULL;
            }
            uint64_t digest;
            unsigned long k = slot ? PyLong_AsUnsignedLong(PyTuple_GET_ITEM(flows, 1)) : 0;
            if (PyErr_Occurred()) {
                Py_CLEAR(groups);
                break;
            }
            if (slot) at = slot->at;
            PyObject *end = slot && arrows ? (launch_arrow(rank, PyTuple_GET_ITEM(flows, 0), k, &digest)
                                              ? PyLong_FromUnsignedLongLong(digest) : NULL) : NULL;
            if (slot && arrows && !(end && (ends = PyTuple_Pack(1, end)))) {
                Py_XDECREF(end);
                Py_CLEAR(groups);
                break;
            }
            Py_XDECREF(end);
            PyObject *items[SLICE_FIELDS];
            for (int f = 0; f < SLICE_FLOWS_OUT; f++) items[f] = Py_NewRef(PyTuple_GET_ITEM(s, f));
            items[SLICE_FLOWS_OUT] = Py_NewRef(EMPTY_TUPLE);
            items[SLICE_FLOWS_IN] = ends == EMPTY_TUPLE ? Py_NewRef(EMPTY_TUPLE) : ends;
            made = record((PyObject *)Py_TYPE(s), items, SLICE_FIELDS);
        }
        if (group_add(groups, steps_before(starts, steps, at), made) < 0) Py_CLEAR(groups);
    }
    PyBuffer_Release(&view);
    return groups;
}

/* Whether ``name`` is the user's marker's (xplane._is_marker): 1, 0, -1 on error */
static int is_marker(PyObject *marker, PyObject *name) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(marker);
    if (n && PyUnicode_READ_CHAR(marker, n - 1) == '*') {
        PyObject *prefix = PyUnicode_Substring(marker, 0, n - 1);
        if (!prefix) return -1;
        Py_ssize_t found = PyUnicode_Tailmatch(name, prefix, 0, PY_SSIZE_T_MAX, -1);
        Py_DECREF(prefix);
        return (int)found;
    }
    return PyUnicode_Compare(name, marker) == 0 ? 1 : PyErr_Occurred() ? -1 : 0;
}

/* A step's range among the host's events (xplane._marks): 1 (and *number, new: an int, or None for
 * the marker's), 0, -1 on error */
static int step_mark(PyObject *c, PyObject *name, PyObject *stats, PyObject **number) {
    PyObject *marker = PyTuple_GET_ITEM(c, HOST_IN_C_MARKER);
    if (marker != Py_None) {
        int marks = is_marker(marker, name);
        if (marks > 0) *number = Py_NewRef(Py_None);
        return marks;
    }
    PyObject *step = int_stat(stats, S_STEP_NUM);
    if (!step) return 0;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(step, &overflow);
    long long limit = PyLong_AsLongLong(PyTuple_GET_ITEM(c, HOST_IN_C_ID_LIMIT));
    if (PyErr_Occurred()) return -1;
    if (overflow || v < 0 || v >= limit) return 0;
    *number = Py_NewRef(step);
    return 1;
}

/* xhost(decoded, in_c, lane, base_ns) -> ([Slice], [(start, dur, step number or None)]) | None: a batch
 * of a host line's events (decoded by xevents with the key stats), as _host_work's rule takes them
 * (xplane.HostInC): the steps' ranges apart; each launch's time kept in ``launched``; in detail each
 * event kept a slice, its args from its bytes, an arrow to each kernel of its launch; None: the rule's */
static PyObject *xhost(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 4 || !PyList_Check(argv[0]) || !PyTuple_Check(argv[1]) || PyTuple_GET_SIZE(argv[1]) != HOST_IN_C_FIELDS
        || !PyLong_Check(argv[3])) {
        PyErr_SetString(PyExc_TypeError, "xhost(decoded: list, in_c: HostInC, lane, base_ns)");
        return NULL;
    }
    PyObject *decoded = argv[0], *c = argv[1], *lane = argv[2];
    Launches *launched = (Launches *)PyTuple_GET_ITEM(c, HOST_IN_C_LAUNCHED);
    Launches *elsewhere = (Launches *)PyTuple_GET_ITEM(c, HOST_IN_C_ELSEWHERE);
    if (!PyObject_TypeCheck((PyObject *)launched, &LaunchesType) || !PyObject_TypeCheck((PyObject *)elsewhere, &LaunchesType)) {
        PyErr_SetString(PyExc_TypeError, "xhost: HostInC.launched and .elsewhere are Launches");
        return NULL;
    }
    int detail = PyObject_IsTrue(PyTuple_GET_ITEM(c, HOST_IN_C_DETAIL));
    int first = PyObject_IsTrue(PyTuple_GET_ITEM(c, HOST_IN_C_FIRST));
    long long rank = PyLong_AsLongLong(PyTuple_GET_ITEM(c, HOST_IN_C_RANK));
    if (detail < 0 || first < 0 || (rank == -1 && PyErr_Occurred())) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(decoded);
    Timed *timed = PyMem_Malloc(sizeof(Timed) * (size_t)(n ? n : 1));
    if (!timed) return PyErr_NoMemory();
    int ok = timed_all(decoded, PyTuple_GET_ITEM(c, HOST_IN_C_NAMES), argv[3], timed);
    PyObject *slices = ok > 0 ? PyList_New(0) : NULL, *marks = slices ? PyList_New(0) : NULL;
    for (Py_ssize_t i = 0; marks && i < n; i++) {
        PyObject *event = PyList_GET_ITEM(decoded, i), *stats = PyTuple_GET_ITEM(event, 4), *number = NULL;
        if (!PyDict_Check(stats)) goto fail;
        int marks_step = step_mark(c, timed[i].name, stats, &number);
        if (marks_step < 0) goto fail;
        if (marks_step) {  /* drawn as the step it is, on every rank */
            PyObject *range = Py_BuildValue("(LLN)", timed[i].start, timed[i].dur, number);
            if (!range || PyList_Append(marks, range) < 0) {
                Py_XDECREF(range);
                goto fail;
            }
            Py_DECREF(range);
            continue;
        }
        PyObject *id = int_stat(stats, S_CORRELATION_ID);
        Launch *slot = id ? launch_of(launched, id, 0) : NULL;
        if (PyErr_Occurred()) goto fail;
        if (slot) {  /* a launch of this rank's work: its time kept */
            slot->at = timed[i].start;
            slot->launched = 1;
        } else if (!first) {
            continue;
        } else if (id) {
            Launch *other = launch_of(elsewhere, id, 0);
            if (PyErr_Occurred()) goto fail;
            if (other && other->count > 0) continue;  /* another rank's launch */
        }
        if (!detail) continue;  /* host events are drawn in detail only */
        PyObject *arrows = slot && slot->count ? launch_arrows(rank, id, slot->count) : Py_NewRef(EMPTY_TUPLE);
        PyObject *all = arrows ? read_event(PyTuple_GET_ITEM(event, 5), PyTuple_GET_ITEM(c, HOST_IN_C_STAT_NAMES), NULL)
                               : NULL;
        if (all == Py_None) {
            Py_DECREF(all);
            PyErr_SetString(PyExc_RuntimeError, "xhost: an event C decoded once it did not decode again");
            all = NULL;
        }
        PyObject *args = NULL;
        if (all) {
            PyObject *found = PyTuple_GET_ITEM(all, 4);
            args = PyDict_GET_SIZE(found) ? as_json(PyTuple_GET_ITEM(c, HOST_IN_C_DUMPS), Py_NewRef(found))
                                          : Py_NewRef(Py_None);
            Py_DECREF(all);
        }
        if (!args) {
            Py_XDECREF(arrows);
            goto fail;
        }
        PyObject *items[SLICE_FIELDS] = {
            Py_NewRef(PyTuple_GET_ITEM(c, HOST_IN_C_RANK)), Py_NewRef(PyTuple_GET_ITEM(c, HOST_IN_C_HOST_LAYER)),
            Py_NewRef(lane), Py_NewRef(timed[i].name), PyLong_FromLongLong(timed[i].start),
            PyLong_FromLongLong(timed[i].dur), args, Py_NewRef(EMPTY), arrows, Py_NewRef(EMPTY_TUPLE)};
        if (append_record(slices, PyTuple_GET_ITEM(c, HOST_IN_C_SLICE_TYPE), items) < 0) goto fail;
        continue;
    fail:
        Py_CLEAR(slices);
        Py_CLEAR(marks);
    }
    PyMem_Free(timed);
    if (ok < 0 || (ok > 0 && !marks)) {
        Py_XDECREF(slices);
        return NULL;
    }
    return ok ? Py_BuildValue("(NN)", slices, marks) : Py_NewRef(Py_None);
}

int xplane_ready(PyObject *module) {
    if (!(S_CORRELATION_ID = PyUnicode_InternFromString("correlation_id")) ||
        !(S_STEP_NUM = PyUnicode_InternFromString("step_num")) || !(S_STREAM_ARG = PyUnicode_InternFromString("Stream")))
        return -1;
    if (PyType_Ready(&LaunchesType) < 0) return -1;
    return PyModule_AddObjectRef(module, "Launches", (PyObject *)&LaunchesType);
}

CORE_PRIVATE PyMethodDef XPLANE_METHODS[] = {
    {"xevents", (PyCFunction)(void (*)(void))xevents, METH_FASTCALL,
     "xevents(events, stat_names, keys) -> [(metadata_id, counted, offset_ps, duration_ps, stats, raw)] | None: "
     "XEvents' bytes read as protobuf reads them (None: left to protobuf)"},
    {"line_fields", (PyCFunction)(void (*)(void))line_fields, METH_FASTCALL,
     "line_fields(piece, at, most) -> (events, other fields' wire, next) | None: a piece of an XLine's wire"},
    {"xdevice", (PyCFunction)(void (*)(void))xdevice, METH_FASTCALL,
     "xdevice(decoded, in_c, lane, stream, on_stream, base_ns) -> [Slice] | None: a GPU stream line's batch"},
    {"xkernels", (PyCFunction)(void (*)(void))xkernels, METH_FASTCALL,
     "xkernels(decoded, names, base_ns, found) -> True | None: a batch's correlation ids counted in found"},
    {"xfiled", (PyCFunction)(void (*)(void))xfiled, METH_FASTCALL,
     "xfiled(records, starts, launched, rank, arrows) -> {step index: [Slice]}: records filed under their steps"},
    {"xhost", (PyCFunction)(void (*)(void))xhost, METH_FASTCALL,
     "xhost(decoded, in_c, lane, base_ns) -> ([Slice], [(start, dur, step)]) | None: a host line's batch"},
    {NULL, NULL, 0, NULL},
};
