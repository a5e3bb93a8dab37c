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

int xplane_ready(PyObject *module) {
    if (PyType_Ready(&LaunchesType) < 0) return -1;
    return PyModule_AddObjectRef(module, "Launches", (PyObject *)&LaunchesType);
}

CORE_PRIVATE PyMethodDef XPLANE_METHODS[] = {
    {"xevents", (PyCFunction)(void (*)(void))xevents, METH_FASTCALL,
     "xevents(events, stat_names, keys) -> [(metadata_id, counted, offset_ps, duration_ps, stats, raw)] | None: "
     "XEvents' bytes read as protobuf reads them (None: left to protobuf)"},
    {"line_fields", (PyCFunction)(void (*)(void))line_fields, METH_FASTCALL,
     "line_fields(piece, at, most) -> (events, other fields' wire, next) | None: a piece of an XLine's wire"},
    {NULL, NULL, 0, NULL},
};
