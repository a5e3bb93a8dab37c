/* The per-event loop of the Perfetto writer (writers/perfetto.py), in C.
 *
 * A conversion's detail output is one TracePacket per slice begin, slice end and counter
 * value, each a few dozen bytes; in Python their encoding cost ~10 us per event. This loop
 * encodes the common case itself (known tracks, interned names, float/int/string arguments
 * seen before, new strings interned into the tables perfetto._Interner holds, by its rules and
 * with its field numbers; nested values as the compact JSON text orjson.dumps writes, where they
 * hold no floats) and calls back into Python for what else changes the sequence's state (a new
 * track) or is rare (huge ints, floats in nested values), so the bytes written stay those of
 * perfetto.py. Field numbers there. A slice's args, raw JSON read with no dict made, are put in
 * _perfetto_args.c (pf_put_args); what the two files share is in _perfetto_core.h.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../records.h"
#include "_perfetto_core.h"

static int buf_fixed64(Buf *b, unsigned long long v) {
    if (buf_reserve(b, 8) < 0) return -1;
    for (int i = 0; i < 8; i++) b->data[b->len++] = (char)((v >> (8 * i)) & 0xFF);
    return 0;
}

static int buf_double(Buf *b, double d) {
    unsigned long long v;
    memcpy(&v, &d, 8);
    return buf_fixed64(b, v);
}

/* keys: field << 3 | wire type (DebugAnnotation's values' in _perfetto_core.h) */
#define K_PACKET 0x0A        /* Trace.packet, length */
#define K_TIMESTAMP 0x40     /* TracePacket.timestamp (8), varint */
#define K_TRACK_EVENT 0x5A   /* TracePacket.track_event (11), length */
#define K_ANNOTATION 0x22    /* TrackEvent.debug_annotations (4), length */
#define K_SEQ_FLAGS 0x68     /* TracePacket.sequence_flags (13), varint */
#define K_INTERNED 0x62      /* TracePacket.interned_data (12), length */
#define K_IID 0x08           /* EventName, DebugAnnotationName, InternedString: iid (1), varint */
#define K_TEXT 0x12          /* ... and name or str (2), length */
#define NEEDS_STATE 2
static const unsigned char K_DOUBLE_COUNTER[2] = {0xE1, 0x02};  /* double_counter_value (44), fixed64 */
static const unsigned char K_FLOW_OUT[2] = {0xF9, 0x02};        /* flow_ids (47), fixed64 */
static const unsigned char K_FLOW_IN[2] = {0x81, 0x03};         /* terminating_flow_ids (48), fixed64 */

#define SMALL (1 << 14)          /* ints below this repeat: cached with their name, per sequence */

static void table_clear(Table *t) {
    Py_CLEAR(t->interner); Py_CLEAR(t->refs); Py_CLEAR(t->pending); Py_CLEAR(t->ref_key);
}

static void state_clear(State *st) {
    Py_CLEAR(st->tracks); table_clear(&st->names); table_clear(&st->arg_names); table_clear(&st->strings);
    Py_CLEAR(st->arg_cache); Py_CLEAR(st->tail);
    Py_CLEAR(st->last_track); Py_CLEAR(st->last_prefixes);
}

/* A field number of ``interner`` (an attribute) into ``field``. */
static int field_of(PyObject *interner, const char *name, unsigned long *field) {
    PyObject *value = PyObject_GetAttrString(interner, name);
    *field = value ? PyLong_AsUnsignedLong(value) : 0;
    Py_XDECREF(value);
    return PyErr_Occurred() || *field >= 1 << 28 ? -1 : 0;
}

/* The table ``seq.<attr>``'s state into ``t``. */
static int table_init(Table *t, PyObject *seq, const char *attr) {
    if (!(t->interner = PyObject_GetAttrString(seq, attr))) return -1;
    if (!(t->refs = PyObject_GetAttrString(t->interner, "refs"))) return -1;
    if (!(t->pending = PyObject_GetAttrString(t->interner, "pending"))) return -1;
    if (!(t->ref_key = PyObject_GetAttrString(t->interner, "ref_key"))) return -1;
    if (field_of(t->interner, "table_field", &t->table_field) < 0 ||
        field_of(t->interner, "inline_field", &t->inline_field) < 0 || !PyDict_CheckExact(t->refs) ||
        !PyByteArray_CheckExact(t->pending) || !PyBytes_CheckExact(t->ref_key)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "unexpected interner state");
        return -1;
    }
    return 0;
}

static int state_init(State *st, PyObject *seq, PyObject *annotation, PyObject *decode) {
    memset(st, 0, sizeof(*st));
    st->seq = seq;
    st->annotation = annotation;
    st->decode = decode;
    if (!(st->tracks = PyObject_GetAttrString(seq, "tracks"))) goto fail;
    if (table_init(&st->names, seq, "names") < 0 || table_init(&st->arg_names, seq, "arg_names") < 0 ||
        table_init(&st->strings, seq, "strings") < 0)
        goto fail;
    if (!(st->arg_cache = PyObject_GetAttrString(seq, "arg_cache"))) goto fail;
    if (!(st->tail = PyObject_GetAttrString(seq, "tail"))) goto fail;
    if (!PyDict_CheckExact(st->tracks) || !PyDict_CheckExact(st->arg_cache) ||
        !PyBytes_CheckExact(st->tail)) {
        PyErr_SetString(PyExc_TypeError, "unexpected sequence state");
        goto fail;
    }
    return 0;
fail:
    state_clear(st);
    return -1;
}

/* ``text`` written inline in field ``field`` (perfetto._str); NULL with no error set for text with
 * surrogates (Python replaces them). */
static PyObject *inline_text(PyObject *text, unsigned field) {
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n);
    if (!utf8) { PyErr_Clear(); return NULL; }
    Buf b = {0};
    PyObject *made = NULL;
    if (buf_varint(&b, field << 3 | 2) == 0 && buf_varint(&b, n) == 0 && buf_put(&b, utf8, n) == 0)
        made = PyBytes_FromStringAndSize(b.data, b.len);
    PyMem_Free(b.data);
    return made;
}

static int varint_len(unsigned long long v) {
    int n = 1;
    while (v >= 0x80) { v >>= 7; n++; }
    return n;
}

/* ``text`` (``n`` bytes of UTF-8) interned as ``t``'s string number ``iid``: its reference made and
 * remembered, its definition added to the table's pending ones (as perfetto._Interner does). */
static PyObject *intern_new(State *st, Table *t, PyObject *text, const char *utf8, Py_ssize_t n,
                            unsigned long long iid) {
    Buf b = {0};
    PyObject *made = NULL;
    if (buf_bytes(&b, t->ref_key) < 0 || buf_varint(&b, iid) < 0) goto done;
    if (!(made = PyBytes_FromStringAndSize(b.data, b.len)) || PyDict_SetItem(t->refs, text, made) < 0) {
        Py_CLEAR(made);
        goto done;
    }
    b.len = 0;  /* the definition: InternedData.<table> { iid, text } */
    Py_ssize_t entry_len = 1 + varint_len(iid) + 1 + varint_len(n) + n;
    Py_ssize_t held = PyByteArray_GET_SIZE(t->pending);
    if (buf_varint(&b, t->table_field << 3 | 2) < 0 || buf_varint(&b, entry_len) < 0 ||
        buf_varint(&b, K_IID) < 0 || buf_varint(&b, iid) < 0 || buf_varint(&b, K_TEXT) < 0 ||
        buf_varint(&b, n) < 0 || buf_put(&b, utf8, n) < 0 ||
        PyByteArray_Resize(t->pending, held + b.len) < 0) {
        Py_CLEAR(made);
        goto done;
    }
    memcpy(PyByteArray_AS_STRING(t->pending) + held, b.data, b.len);
    st->touched = 1;
done:
    PyMem_Free(b.data);
    return made;
}

/* An interned string's reference (``field: iid`` bytes), interning it if new; past the table's cap
 * the text itself in the table's inline field (as perfetto._Interner does, without its call: a
 * trace of many distinct names, the database form's ``MatMulV2_302``, passes the cap). Strings
 * with surrogates, and what is no str, are left to the interner. */
PyObject *pf_ref(State *st, Table *t, PyObject *text) {
    PyObject *found = PyDict_GetItemWithError(t->refs, text);
    if (found) { Py_INCREF(found); return found; }
    if (PyErr_Occurred()) return NULL;
    if (PyUnicode_CheckExact(text)) {
        Py_ssize_t size = PyDict_GET_SIZE(t->refs);
        if (size >= MAX_INTERNED) {
            PyObject *field = inline_text(text, t->inline_field);
            if (field) return field;
        } else {
            Py_ssize_t n;
            const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n);
            if (utf8) return intern_new(st, t, text, utf8, n, (unsigned long long)size + 1);
            PyErr_Clear();
        }
    }
    st->touched = 1;
    PyObject *made = PyObject_CallOneArg(t->interner, text);
    if (made && !PyBytes_CheckExact(made)) {
        Py_DECREF(made);
        PyErr_SetString(PyExc_TypeError, "an interner returned no bytes");
        return NULL;
    }
    return made;
}

static int put_ref(State *st, Buf *b, Table *t, PyObject *text) {
    PyObject *r = pf_ref(st, t, text);
    if (!r) return -1;
    int rc = buf_bytes(b, r);
    Py_DECREF(r);
    return rc;
}

/* A string value's field: its interned id, or past the table's cap the text itself; NULL with no
 * error set: leave it to Python. */
static PyObject *string_value(State *st, PyObject *text) {
    if (PyDict_GET_SIZE(st->strings.refs) < MAX_INTERNED) return pf_ref(st, &st->strings, text);
    PyObject *found = PyDict_GetItemWithError(st->strings.refs, text);
    if (found) { Py_INCREF(found); return found; }
    return PyErr_Occurred() ? NULL : inline_text(text, st->strings.inline_field);
}

/* ``key``'s annotation with a value field of ``value_len`` bytes, after what ``b`` holds */
static int put_named(State *st, Buf *b, PyObject *key, const char *value, Py_ssize_t value_len) {
    PyObject *name = pf_ref(st, &st->arg_names, key);
    if (!name) return -1;
    int rc = buf_put(b, "\x22", 1) || buf_varint(b, PyBytes_GET_SIZE(name) + value_len) ||
             buf_bytes(b, name) || buf_put(b, value, value_len);
    Py_DECREF(name);
    return rc ? -1 : 0;
}

/* A string annotation, as _annotation writes one (with no ``arg_cache``: a nested value's text
 * seldom repeats as the same object): ``text``'s interned id, or past the cap the text itself. */
int pf_put_text(State *st, Buf *b, PyObject *key, PyObject *text) {
    PyObject *field = string_value(st, text);
    if (!field) {
        if (PyErr_Occurred()) return -1;
        st->touched = 1;  /* text the table cannot hold as it is: the interner's rule */
        PyObject *made = PyObject_CallFunctionObjArgs(st->annotation, key, text, st->seq, NULL);
        if (!made) return -1;
        int rc = PyBytes_CheckExact(made) ? buf_bytes(b, made) : -1;
        if (rc < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_annotation returned no bytes");
        Py_DECREF(made);
        return rc;
    }
    int rc = put_named(st, b, key, PyBytes_AS_STRING(field), PyBytes_GET_SIZE(field));
    Py_DECREF(field);
    return rc;
}

/* A str in JSON as orjson.dumps writes it: UTF-8 as it is, but for ``"``, ``\`` and control chars
 * (\b \t \n \f \r, the others as \u00xx, lower-case): 1, 0 (surrogates: left to Python), -1 error. */
static int put_json_string(Buf *b, PyObject *text) {
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(text, &n), *end;
    if (!p) { PyErr_Clear(); return 0; }
    if (buf_put(b, "\"", 1) < 0) return -1;
    for (end = p + n; p < end;) {
        const char *run = p;
        while (p < end && (unsigned char)*p >= 0x20 && *p != '"' && *p != '\\') p++;
        if (buf_put(b, run, p - run) < 0) return -1;
        if (p == end) break;
        unsigned char c = (unsigned char)*p++;
        char escape[6] = {'\\', (char)c, 0, 0, 0, 0};
        int len = 2;
        switch (c) {
        case '"': case '\\': break;
        case '\b': escape[1] = 'b'; break;
        case '\t': escape[1] = 't'; break;
        case '\n': escape[1] = 'n'; break;
        case '\f': escape[1] = 'f'; break;
        case '\r': escape[1] = 'r'; break;
        default:
            memcpy(escape + 1, "u00", 3);
            escape[4] = "0123456789abcdef"[c >> 4];
            escape[5] = "0123456789abcdef"[c & 15];
            len = 6;
        }
        if (buf_put(b, escape, len) < 0) return -1;
    }
    return buf_put(b, "\"", 1) < 0 ? -1 : 1;
}

/* ``value`` in compact JSON as orjson.dumps writes it, for lists, tuples and dicts (str keys) of
 * str, int, bool, None and of these: 1, 0 (left to Python: floats, whose digits orjson writes by
 * rules of its own; ints past 64 bits; surrogates; other keys and types, subclasses), -1 error. */
static int put_json(Buf *b, PyObject *value, int depth) {
    if (value == Py_None) return buf_put(b, "null", 4) < 0 ? -1 : 1;
    if (value == Py_True) return buf_put(b, "true", 4) < 0 ? -1 : 1;
    if (value == Py_False) return buf_put(b, "false", 5) < 0 ? -1 : 1;
    if (PyUnicode_CheckExact(value)) return put_json_string(b, value);
    if (PyLong_CheckExact(value)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (overflow) return 0;
        return buf_decimal(b, v) < 0 ? -1 : 1;
    }
    if (depth >= MAX_DEPTH) return 0;
    int is_list = PyList_CheckExact(value);
    if (is_list || PyTuple_CheckExact(value)) {  /* no Python code runs here: the list stays as it is */
        Py_ssize_t n = is_list ? PyList_GET_SIZE(value) : PyTuple_GET_SIZE(value);
        if (buf_put(b, "[", 1) < 0) return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i && buf_put(b, ",", 1) < 0) return -1;
            int rc = put_json(b, is_list ? PyList_GET_ITEM(value, i) : PyTuple_GET_ITEM(value, i), depth + 1);
            if (rc <= 0) return rc;
        }
        return buf_put(b, "]", 1) < 0 ? -1 : 1;
    }
    if (PyDict_CheckExact(value)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0, written = 0;
        if (buf_put(b, "{", 1) < 0) return -1;
        while (PyDict_Next(value, &pos, &k, &v)) {
            if (!PyUnicode_CheckExact(k)) return 0;
            if (written++ && buf_put(b, ",", 1) < 0) return -1;
            int rc = put_json_string(b, k);
            if (rc <= 0) return rc;
            if (buf_put(b, ":", 1) < 0) return -1;
            if ((rc = put_json(b, v, depth + 1)) <= 0) return rc;
        }
        return buf_put(b, "}", 1) < 0 ? -1 : 1;
    }
    return 0;
}

/* A nested value's annotation: its compact JSON text as a string (as _annotation writes it).
 * 1 written, 0 left to Python, -1 error. */
static int put_nested(State *st, Buf *b, PyObject *key, PyObject *value) {
    Buf json = {0};
    int rc = put_json(&json, value, 0);
    if (rc > 0) {
        PyObject *text = PyUnicode_DecodeUTF8(json.data ? json.data : "", json.len, NULL);
        rc = !text || pf_put_text(st, b, key, text) < 0 ? -1 : 1;
        Py_XDECREF(text);
    }
    PyMem_Free(json.data);
    return rc;
}

/* One argument as a DebugAnnotation: floats and ids never repeat and are encoded each time;
 * strings and small ints are encoded once per sequence (``arg_cache``); None is left out, bools
 * and nested values are encoded each time (a bool's pair would be an int's in the cache: True == 1). */
int pf_put_annotation(State *st, Buf *b, PyObject *key, PyObject *value) {
    PyObject *pair = NULL, *name = NULL, *field = NULL;
    long long number = 0;
    int overflow = 0, is_int = PyLong_CheckExact(value), is_str = PyUnicode_CheckExact(value);
    if (value == Py_None) return 0;
    if (PyUnicode_CheckExact(key) && PyBool_Check(value)) {
        const char field_bytes[2] = {K_A_BOOL, value == Py_True};
        return put_named(st, b, key, field_bytes, 2);
    }
    if (PyUnicode_CheckExact(key) && (PyList_CheckExact(value) || PyDict_CheckExact(value) ||
                                      PyTuple_CheckExact(value))) {
        int rc = put_nested(st, b, key, value);
        if (rc != 0) return rc < 0 ? -1 : 0;
    }
    if (!PyUnicode_CheckExact(key) || !(is_int || is_str || PyFloat_CheckExact(value))) goto python;
    if (is_int) {
        number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (number == -1 && PyErr_Occurred()) return -1;
        if (overflow) goto python;
    }
    int cacheable = is_str || (is_int && number >= 0 && number < SMALL);
    if (cacheable) {
        if (!(pair = PyTuple_Pack(2, key, value))) return -1;
        PyObject *found = PyDict_GetItemWithError(st->arg_cache, pair);
        if (found) {
            Py_DECREF(pair);
            return buf_bytes(b, found);
        }
        if (PyErr_Occurred()) goto fail;
    }
    if (!(name = pf_ref(st, &st->arg_names, key))) goto fail;
    unsigned char scalar[11];  /* an int_value (tag and a varint of up to 10 bytes) or a double_value */
    const char *value_bytes = (const char *)scalar;
    Py_ssize_t value_len = 0;
    if (is_str) {
        if (!(field = string_value(st, value))) {
            if (PyErr_Occurred()) goto fail;
            Py_DECREF(name); Py_XDECREF(pair);
            goto python;
        }
        value_bytes = PyBytes_AS_STRING(field);
        value_len = PyBytes_GET_SIZE(field);
    } else if (is_int) {
        unsigned long long v = (unsigned long long)number;
        scalar[value_len++] = K_A_INT;
        while (v >= 0x80) { scalar[value_len++] = (unsigned char)(v | 0x80); v >>= 7; }
        scalar[value_len++] = (unsigned char)v;
    } else {
        double d = PyFloat_AS_DOUBLE(value);
        unsigned long long v;
        memcpy(&v, &d, 8);
        scalar[value_len++] = K_A_DOUBLE;
        for (int i = 0; i < 8; i++) scalar[value_len++] = (unsigned char)(v >> (8 * i));
    }
    /* DebugAnnotation: its name, then its value, written straight after what ``b`` holds */
    Py_ssize_t start = b->len;
    int rc = buf_put(b, "\x22", 1) || buf_varint(b, PyBytes_GET_SIZE(name) + value_len) ||
             buf_bytes(b, name) || buf_put(b, value_bytes, value_len);
    if (!rc && cacheable && PyDict_GET_SIZE(st->arg_cache) < MAX_INTERNED) {
        PyObject *bytes = PyBytes_FromStringAndSize(b->data + start, b->len - start);
        rc = !bytes || PyDict_SetItem(st->arg_cache, pair, bytes) < 0;
        Py_XDECREF(bytes);
    }
    Py_DECREF(name); Py_XDECREF(field); Py_XDECREF(pair);
    return rc ? -1 : 0;
fail:
    Py_XDECREF(name); Py_XDECREF(pair);
    return -1;
python:
    st->touched = 1;  /* huge ints, nested values with floats, keys that are no strings */
    PyObject *made = PyObject_CallFunctionObjArgs(st->annotation, key, value, st->seq, NULL);
    if (!made) return -1;
    rc = PyBytes_CheckExact(made) ? buf_bytes(b, made) : -1;
    if (rc < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_annotation returned no bytes");
    Py_DECREF(made);
    return rc;
}

/* An int of 0 to 2**64 - 1. (PyLong_AsUnsignedLongLong and PyLong_AsLongLong convert through
 * _PyLong_AsByteArray, slow for the epoch ns and 64-bit ids written per event.) */
static int as_u64(PyObject *value, unsigned long long *out) {
    if (!PyLong_Check(value) || _PyLong_Sign(value) < 0 || _PyLong_NumBits(value) > 64) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_OverflowError, "not a 64-bit unsigned int: %R", value);
        return -1;
    }
    *out = PyLong_AsUnsignedLongLongMask(value);
    return 0;
}

static int put_flows(Buf *b, PyObject *flows, const unsigned char *key) {
    if (!PyTuple_Check(flows)) { PyErr_SetString(PyExc_TypeError, "flow ids must be a tuple"); return -1; }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(flows); i++) {
        unsigned long long id;
        if (as_u64(PyTuple_GET_ITEM(flows, i), &id) < 0) return -1;
        if (buf_put(b, (const char *)key, 2) < 0 || buf_fixed64(b, id) < 0) return -1;
    }
    return 0;
}

/* A time in ns as a C long long */
static int ns_of(PyObject *ts, long long *out) {
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(ts, &overflow);
    if (overflow) PyErr_SetString(PyExc_OverflowError, "a time past 2**63 ns");
    return overflow || (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* timestamp: ts (negative ones as their two's complement, as perfetto._varint writes them) */
static int put_ns(Buf *b, long long ts) {
    return buf_put(b, "\x40", 1) < 0 || buf_varint(b, (unsigned long long)ts) < 0 ? -1 : 0;
}

static int put_timestamp(Buf *b, PyObject *ts) {
    long long v;
    return ns_of(ts, &v) < 0 ? -1 : put_ns(b, v);
}

/* out += Trace.packet(payload) */
static int put_packet(Buf *out, Buf *payload) {
    return buf_put(out, "\x0a", 1) < 0 || buf_varint(out, payload->len) < 0 ||
           buf_put(out, payload->data, payload->len) < 0 ? -1 : 0;
}

/* Track prefixes (begin-event prefix, end-packet suffix), declaring the track in Python (which
 * writes its descriptor into a bytearray we append to ``out``) on its first use. */
static PyObject *prefixes_of(State *st, Buf *out, PyObject *declare, PyObject *track) {
    if (track == st->last_track) { Py_INCREF(st->last_prefixes); return st->last_prefixes; }
    PyObject *found = PyDict_GetItemWithError(st->tracks, track);
    if (found) {
        Py_INCREF(track); Py_XSETREF(st->last_track, track);
        Py_INCREF(found); Py_XSETREF(st->last_prefixes, found);
        Py_INCREF(found);
        return found;
    }
    if (PyErr_Occurred()) return NULL;
    PyObject *written = PyByteArray_FromStringAndSize(NULL, 0);
    if (!written) return NULL;
    PyObject *made = PyObject_CallFunctionObjArgs(declare, track, written, st->seq, NULL);
    if (made && buf_put(out, PyByteArray_AS_STRING(written), PyByteArray_GET_SIZE(written)) < 0)
        Py_CLEAR(made);
    Py_DECREF(written);
    if (made && (!PyTuple_Check(made) || PyTuple_GET_SIZE(made) != 2 ||
                 !PyBytes_CheckExact(PyTuple_GET_ITEM(made, 0)) ||
                 !PyBytes_CheckExact(PyTuple_GET_ITEM(made, 1)))) {
        Py_DECREF(made);
        PyErr_SetString(PyExc_TypeError, "declare must return two bytes");
        return NULL;
    }
    return made;
}

/* The interned data the packet must carry, if any was added: the tables' pending definitions in
 * one InternedData (as perfetto._Sequence.interned), the tables then emptied. */
static int put_interned(State *st, Buf *b) {
    if (!st->touched) return 0;
    st->touched = 0;
    Table *tables[3] = {&st->names, &st->arg_names, &st->strings};
    Py_ssize_t total = 0;
    for (int i = 0; i < 3; i++) total += PyByteArray_GET_SIZE(tables[i]->pending);
    if (!total) return 0;
    if (buf_varint(b, K_INTERNED) < 0 || buf_varint(b, total) < 0) return -1;
    for (int i = 0; i < 3; i++) {
        PyObject *pending = tables[i]->pending;
        if (buf_put(b, PyByteArray_AS_STRING(pending), PyByteArray_GET_SIZE(pending)) < 0 ||
            PyByteArray_Resize(pending, 0) < 0)
            return -1;
    }
    return 0;
}


/* An end at ``ts`` on the track whose end-packet suffix is ``end_suffix`` */
static int put_end(Buf *out, Buf *payload, PyObject *end_suffix, long long ts) {
    payload->len = 0;
    return put_ns(payload, ts) < 0 || buf_bytes(payload, end_suffix) < 0 ? -1 : put_packet(out, payload);
}

/* The begin of slice ``s``, starting at ``start``, on the track whose begin-event prefix is ``begin_prefix`` */
static int put_begin(State *st, Buf *out, Buf *body, Buf *payload, PyObject *begin_prefix, PyObject *s,
                     long long start) {
    if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) < SLICE_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "expected a Slice");
        return -1;
    }
    body->len = payload->len = 0;
    PyObject *args = PyTuple_GET_ITEM(s, SLICE_ARGS), *flows_out = PyTuple_GET_ITEM(s, SLICE_FLOWS_OUT),
             *flows_in = PyTuple_GET_ITEM(s, SLICE_FLOWS_IN);
    if (buf_bytes(body, begin_prefix) < 0 || put_ref(st, body, &st->names, PyTuple_GET_ITEM(s, SLICE_NAME)) < 0)
        return -1;
    int has_args = PyObject_IsTrue(args);
    if (has_args < 0 || (has_args && pf_put_args(st, body, args) < 0)) return -1;
    if (put_flows(body, flows_out, K_FLOW_OUT) < 0 || put_flows(body, flows_in, K_FLOW_IN) < 0) return -1;
    if (put_ns(payload, start) < 0 || buf_put(payload, "\x5a", 1) < 0 ||
        buf_varint(payload, body->len) < 0 || buf_put(payload, body->data, body->len) < 0 ||
        put_interned(st, payload) < 0 || buf_put(payload, "\x68\x02", 2) < 0 || buf_bytes(payload, st->tail) < 0)
        return -1;
    return put_packet(out, payload);
}

/* Begin(track, slice), End(track, ts_ns) and Value(track, ts_ns, value) hold their track where an
 * End does, and their slice or time within an End's length: an event checked as long as an End
 * has them (a Value's value is read only from the Value type) */
_Static_assert(BEGIN_TRACK == END_TRACK && VALUE_TRACK == END_TRACK && BEGIN_SLICE < END_FIELDS &&
               VALUE_TS_NS < END_FIELDS, "a layout event's track and time are where an End's are");

static int encode_event(State *st, Buf *out, Buf *body, Buf *payload, PyObject *event,
                        PyObject *declare, PyTypeObject *end_type, PyTypeObject *value_type) {
    if (!PyTuple_Check(event) || PyTuple_GET_SIZE(event) < END_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "expected a layout event");
        return -1;
    }
    PyObject *prefixes = prefixes_of(st, out, declare, PyTuple_GET_ITEM(event, END_TRACK));
    if (!prefixes) return -1;
    PyObject *begin_prefix = PyTuple_GET_ITEM(prefixes, 0), *end_suffix = PyTuple_GET_ITEM(prefixes, 1);
    int rc = -1;
    if (Py_IS_TYPE(event, end_type)) {  /* End(track, ts_ns) */
        long long ts;
        if (ns_of(PyTuple_GET_ITEM(event, END_TS_NS), &ts) == 0) rc = put_end(out, payload, end_suffix, ts);
    } else if (Py_IS_TYPE(event, value_type)) {  /* Value(track, ts_ns, value) */
        body->len = payload->len = 0;
        double value = PyFloat_AsDouble(PyTuple_GET_ITEM(event, VALUE_VALUE));
        if (value == -1.0 && PyErr_Occurred()) goto done;
        if (buf_bytes(body, begin_prefix) < 0 || buf_put(body, (const char *)K_DOUBLE_COUNTER, 2) < 0 ||
            buf_double(body, value) < 0)
            goto done;
        if (put_timestamp(payload, PyTuple_GET_ITEM(event, VALUE_TS_NS)) < 0 || buf_put(payload, "\x5a", 1) < 0 ||
            buf_varint(payload, body->len) < 0 || buf_put(payload, body->data, body->len) < 0 ||
            buf_bytes(payload, st->tail) < 0)
            goto done;
        rc = put_packet(out, payload);
    } else {  /* Begin(track, slice) */
        PyObject *s = PyTuple_GET_ITEM(event, BEGIN_SLICE);
        long long start;
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) < SLICE_FIELDS) {
            PyErr_SetString(PyExc_TypeError, "expected a Slice");
            goto done;
        }
        if (ns_of(PyTuple_GET_ITEM(s, SLICE_START_NS), &start) == 0)
            rc = put_begin(st, out, body, payload, begin_prefix, s, start);
    }
done:
    Py_DECREF(prefixes);
    return rc;
}

/* Events are encoded in lane order, their slices made in read order long before: most are no longer
 * in the cache. ``PREFETCH_FAR`` events ahead the slice a begin will read is asked for, and
 * ``PREFETCH_NEAR`` ahead (the slice arrived by then) the objects it holds that ``put_begin`` reads:
 * their loads overlap rather than stall one after another. Only ever a hint: nothing depends on it. */
#define PREFETCH_FAR 12
#define PREFETCH_NEAR 6

static inline PyObject *slice_at(const long long *code, Py_ssize_t at, Py_ssize_t n, PyObject *slices) {
    if (at >= n || code[at] & 1 || code[at + 1] < 0 || code[at + 1] >= PyList_GET_SIZE(slices)) return NULL;
    return PyList_GET_ITEM(slices, code[at + 1]);
}

static inline void prefetch_slice(const long long *code, Py_ssize_t at, Py_ssize_t n, PyObject *slices) {
    PyObject *far = slice_at(code, at + 3 * PREFETCH_FAR, n, slices);
    if (far) {
        __builtin_prefetch(far);
        __builtin_prefetch((char *)far + 64);
    }
    PyObject *near = slice_at(code, at + 3 * PREFETCH_NEAR, n, slices);
    if (near && PyTuple_Check(near) && PyTuple_GET_SIZE(near) >= SLICE_FIELDS) {
        __builtin_prefetch(PyTuple_GET_ITEM(near, SLICE_ARGS));
        __builtin_prefetch(PyTuple_GET_ITEM(near, SLICE_FLOWS_OUT));
        __builtin_prefetch(PyTuple_GET_ITEM(near, SLICE_FLOWS_IN));
    }
}

/* The events of a layout.Placement (tracks, slices, codes: per event (position * 2 [+ 1 for an
 * end], slice index or -1, time)), encoded as encode_event encodes them one by one; a begin's
 * start is its code's, its int not read */
static int encode_placed(State *st, Buf *out, Buf *body, Buf *payload, PyObject *tracks, PyObject *slices,
                         PyObject *codes, PyObject *declare) {
    if (!PyList_CheckExact(tracks) || !PyList_CheckExact(slices) || !PyBytes_CheckExact(codes) ||
        PyBytes_GET_SIZE(codes) % (3 * sizeof(long long))) {
        PyErr_SetString(PyExc_TypeError, "a Placement: tracks, slices (lists), codes (bytes)");
        return -1;
    }
    const long long *code = (const long long *)PyBytes_AS_STRING(codes);
    Py_ssize_t n = PyBytes_GET_SIZE(codes) / sizeof(long long);
    for (Py_ssize_t at = 0; at < n; at += 3) {
        long long kind = code[at], index = code[at + 1], ts = code[at + 2], position = kind >> 1;
        prefetch_slice(code, at, n, slices);
        if (position < 0 || position >= PyList_GET_SIZE(tracks) ||
            (!(kind & 1) && (index < 0 || index >= PyList_GET_SIZE(slices)))) {
            PyErr_SetString(PyExc_IndexError, "a Placement's code past its tracks or slices");
            return -1;
        }
        PyObject *prefixes = prefixes_of(st, out, declare, PyList_GET_ITEM(tracks, position));
        if (!prefixes) return -1;
        int rc = kind & 1 ? put_end(out, payload, PyTuple_GET_ITEM(prefixes, 1), ts)
                          : put_begin(st, out, body, payload, PyTuple_GET_ITEM(prefixes, 0),
                                      PyList_GET_ITEM(slices, index), ts);
        Py_DECREF(prefixes);
        if (rc < 0) return -1;
    }
    return 0;
}

/* encode_chunk(seq, events, declare, annotation, decode, End, Value): ``events`` an iterable of
 * layout events, or a layout.Placement (tracks, slices, codes, values) */
static PyObject *encode_chunk(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_chunk(seq, events, declare, annotation, decode, End, Value)");
        return NULL;
    }
    PyObject *seq = argv[0], *events = argv[1], *declare = argv[2];
    if (!PyType_Check(argv[5]) || !PyType_Check(argv[6])) {
        PyErr_SetString(PyExc_TypeError, "End and Value must be types");
        return NULL;
    }
    State st;
    if (state_init(&st, seq, argv[3], argv[4]) < 0) return NULL;
    PyObject *iterator = NULL, *event, *result = NULL;
    Buf out = {0}, body = {0}, payload = {0};
    if (PyTuple_Check(events) && PyTuple_GET_SIZE(events) == PLACEMENT_FIELDS &&
        PyBytes_Check(PyTuple_GET_ITEM(events, PLACEMENT_CODES))) {  /* no event is bytes */
        if (encode_placed(&st, &out, &body, &payload, PyTuple_GET_ITEM(events, PLACEMENT_TRACKS),
                          PyTuple_GET_ITEM(events, PLACEMENT_SLICES), PyTuple_GET_ITEM(events, PLACEMENT_CODES),
                          declare) < 0)
            goto done;
        events = PyTuple_GET_ITEM(events, PLACEMENT_VALUES);
    }
    if (!(iterator = PyObject_GetIter(events))) goto done;
    while ((event = PyIter_Next(iterator))) {
        int rc = encode_event(&st, &out, &body, &payload, event, declare,
                              (PyTypeObject *)argv[5], (PyTypeObject *)argv[6]);
        Py_DECREF(event);
        if (rc < 0) goto done;
    }
    if (!PyErr_Occurred()) result = PyBytes_FromStringAndSize(out.data ? out.data : "", out.len);
done:
    Py_XDECREF(iterator);
    PyMem_Free(out.data); PyMem_Free(body.data); PyMem_Free(payload.data);
    state_clear(&st);
    return result;
}

static PyObject *encode_args(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 4) {
        PyErr_SetString(PyExc_TypeError, "encode_args(seq, args, annotation, decode)");
        return NULL;
    }
    State st;
    if (state_init(&st, argv[0], argv[2], argv[3]) < 0) return NULL;
    Buf out = {0};
    PyObject *result = NULL;
    if (pf_put_args(&st, &out, argv[1]) == 0) result = PyBytes_FromStringAndSize(out.data ? out.data : "", out.len);
    PyMem_Free(out.data);
    state_clear(&st);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_chunk", (PyCFunction)(void (*)(void))encode_chunk, METH_FASTCALL,
     "encode_chunk(seq, events, declare, annotation, decode, End, Value) -> bytes: the packets of "
     "layout events on one sequence"},
    {"encode_args", (PyCFunction)(void (*)(void))encode_args, METH_FASTCALL,
     "encode_args(seq, args, annotation, decode) -> bytes: a slice's args as debug annotations"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_perfetto_core", .m_doc = "The Perfetto writer's per-event loop.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__perfetto_core(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "MAX_INTERNED", MAX_INTERNED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
