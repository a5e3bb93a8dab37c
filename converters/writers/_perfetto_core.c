/* The per-event loop of the Perfetto writer (writers/perfetto.py), in C.
 *
 * A conversion's detail output is one TracePacket per slice begin, slice end and counter
 * value, each a few dozen bytes; in Python their encoding cost ~10 us per event. This loop
 * encodes the common case itself (known tracks, interned names, float/int/string arguments
 * seen before, new strings interned into the tables perfetto._Interner holds, by its rules and
 * with its field numbers; nested values as the compact JSON text orjson.dumps writes, where they
 * hold no floats) and calls back into Python for what else changes the sequence's state (a new
 * track) or is rare (huge ints, floats in nested values), so the bytes written stay those of
 * perfetto.py. Field numbers there. A slice's raw JSON args are read here too, with no dict made,
 * where they are an object of scalars and of nested values of no floats (``walk_args``).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_buffer.h"
#include "../records.h"

static int buf_bytes(Buf *b, PyObject *bytes) {  /* append a bytes object */
    return buf_put(b, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes));
}

static int buf_varint(Buf *b, unsigned long long v) {
    if (buf_reserve(b, 10) < 0) return -1;
    unsigned char *p = (unsigned char *)b->data + b->len;
    while (v >= 0x80) { *p++ = (unsigned char)(v | 0x80); v >>= 7; }
    *p++ = (unsigned char)v;
    b->len = (char *)p - b->data;
    return 0;
}

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

/* keys: field << 3 | wire type */
#define K_PACKET 0x0A        /* Trace.packet, length */
#define K_TIMESTAMP 0x40     /* TracePacket.timestamp (8), varint */
#define K_TRACK_EVENT 0x5A   /* TracePacket.track_event (11), length */
#define K_ANNOTATION 0x22    /* TrackEvent.debug_annotations (4), length */
#define K_A_DOUBLE 0x29      /* DebugAnnotation.double_value (5), fixed64 */
#define K_A_INT 0x20         /* DebugAnnotation.int_value (4), varint */
#define K_A_BOOL 0x10        /* DebugAnnotation.bool_value (2), varint */
#define K_SEQ_FLAGS 0x68     /* TracePacket.sequence_flags (13), varint */
#define K_INTERNED 0x62      /* TracePacket.interned_data (12), length */
#define K_IID 0x08           /* EventName, DebugAnnotationName, InternedString: iid (1), varint */
#define K_TEXT 0x12          /* ... and name or str (2), length */
#define NEEDS_STATE 2
static const unsigned char K_DOUBLE_COUNTER[2] = {0xE1, 0x02};  /* double_counter_value (44), fixed64 */
static const unsigned char K_FLOW_OUT[2] = {0xF9, 0x02};        /* flow_ids (47), fixed64 */
static const unsigned char K_FLOW_IN[2] = {0x81, 0x03};         /* terminating_flow_ids (48), fixed64 */

#define SMALL (1 << 14)          /* ints below this repeat: cached with their name, per sequence */
#define MAX_INTERNED (1 << 13)   /* strings interned per sequence and table, args cached: bounds memory */
#define MAX_RAW_CACHED (1 << 12) /* raw args remembered per sequence (most never repeat) */

/* One of a sequence's string tables (a perfetto._Interner): text -> reference, the definitions
 * still to write, and its fields. */
typedef struct {
    PyObject *interner, *refs, *pending, *ref_key;  /* the object, a dict, a bytearray, bytes */
    unsigned long table_field, inline_field;
} Table;

/* What one call works with: the sequence's state (perfetto._Sequence) and the Python helpers. */
typedef struct {
    PyObject *tracks;
    Table names, arg_names, strings;
    PyObject *arg_cache, *tail;
    PyObject *annotation;  /* perfetto._annotation(key, value, seq) -> bytes: the rare cases */
    PyObject *decode;      /* raw JSON args -> their value */
    PyObject *seq;
    PyObject *last_track, *last_prefixes;  /* the track an event was last on: most run on one */
    struct MemberCache *members, *raws;    /* the sequence's (``raw_caches``), once raw args come */
    int touched;           /* a string was interned, or Python called: new strings to define? */
} State;

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
static PyObject *ref(State *st, Table *t, PyObject *text) {
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
    PyObject *r = ref(st, t, text);
    if (!r) return -1;
    int rc = buf_bytes(b, r);
    Py_DECREF(r);
    return rc;
}

/* A string value's field: its interned id, or past the table's cap the text itself; NULL with no
 * error set: leave it to Python. */
static PyObject *string_value(State *st, PyObject *text) {
    if (PyDict_GET_SIZE(st->strings.refs) < MAX_INTERNED) return ref(st, &st->strings, text);
    PyObject *found = PyDict_GetItemWithError(st->strings.refs, text);
    if (found) { Py_INCREF(found); return found; }
    return PyErr_Occurred() ? NULL : inline_text(text, st->strings.inline_field);
}

#define MAX_DEPTH 64   /* nested values deeper than this are left to Python (orjson's limit is 255) */

/* ``key``'s annotation with a value field of ``value_len`` bytes, after what ``b`` holds */
static int put_named(State *st, Buf *b, PyObject *key, const char *value, Py_ssize_t value_len) {
    PyObject *name = ref(st, &st->arg_names, key);
    if (!name) return -1;
    int rc = buf_put(b, "\x22", 1) || buf_varint(b, PyBytes_GET_SIZE(name) + value_len) ||
             buf_bytes(b, name) || buf_put(b, value, value_len);
    Py_DECREF(name);
    return rc ? -1 : 0;
}

/* A string annotation, as _annotation writes one (with no ``arg_cache``: a nested value's text
 * seldom repeats as the same object): ``text``'s interned id, or past the cap the text itself. */
static int put_text(State *st, Buf *b, PyObject *key, PyObject *text) {
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
        rc = !text || put_text(st, b, key, text) < 0 ? -1 : 1;
        Py_XDECREF(text);
    }
    PyMem_Free(json.data);
    return rc;
}

/* One argument as a DebugAnnotation: floats and ids never repeat and are encoded each time;
 * strings and small ints are encoded once per sequence (``arg_cache``); None is left out, bools
 * and nested values are encoded each time (a bool's pair would be an int's in the cache: True == 1). */
static int put_annotation(State *st, Buf *b, PyObject *key, PyObject *value) {
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
    if (!(name = ref(st, &st->arg_names, key))) goto fail;
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

static int put_dict(State *st, Buf *b, PyObject *args) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(args, &pos, &key, &value)) {
        /* a callback may run Python code, but never on this dict: hold references anyway */
        Py_INCREF(key); Py_INCREF(value);
        int rc = put_annotation(st, b, key, value);
        Py_DECREF(key); Py_DECREF(value);
        if (rc < 0) return -1;
    }
    return 0;
}

/* ``raw`` decoded by ``decoded_args`` (the rule), its annotations written as a dict's. */
static int put_decoded(State *st, Buf *b, PyObject *raw) {
    PyObject *decoded = PyObject_CallOneArg(st->decode, raw);
    if (!decoded) return -1;
    if (!PyDict_CheckExact(decoded)) {
        PyObject *wrapped = Py_BuildValue("{sO}", "args", decoded);
        Py_DECREF(decoded);
        if (!(decoded = wrapped)) return -1;
    }
    int rc = put_dict(st, b, decoded);
    Py_DECREF(decoded);
    return rc;
}

/* Raw JSON args read without decoding them into a dict (``walk_args``): an object of strings,
 * numbers, booleans and nulls, and of arrays and objects of these but floats (Kineto's ``Input
 * Dims``, ``Input type``), as most slices' args are. Each member is first checked (the whole
 * object, before anything is written), then written as the key and value ``decoded_args`` would
 * have made, through ``put_annotation`` as a dict's are, a nested value as its compact text
 * (``compact_value``: what orjson.dumps writes of its decoded value); anything else (floats in
 * nested values, \u escapes, repeated or escaped keys, ints past 18 digits, text that is no valid
 * JSON) is left to ``decoded_args``, the rule, which the tests compare this against. A string or
 * nested member's annotation, constant on a sequence, is remembered by its text, in C
 * (``MemberCache``): written again with no Python object made; a number's or bool's is encoded
 * each time, its name's reference remembered by its key (``put_number``). */
#define MAX_MEMBERS 64
#define KEY_CACHE 512                 /* a power of two: keys' str objects, shared by every call */
#define MAX_CACHED_KEY 64

/* Two words a step in two lanes, their multiplies overlapping: an args text is ~120 bytes. The
 * hash only places texts in the caches, never decides what is written. */
static unsigned long long hash_text(const char *p, Py_ssize_t n) {
    unsigned long long h = 0, g = 0x243F6A8885A308D3ULL;
    for (; n >= 16; p += 16, n -= 16) {
        unsigned long long w, v;
        memcpy(&w, p, 8);
        memcpy(&v, p + 8, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
        g = (g ^ v) * 0xC2B2AE3D27D4EB4FULL;
        h ^= h >> 29;
        g ^= g >> 31;
    }
    h ^= g;
    for (; n >= 8; p += 8, n -= 8) {
        unsigned long long w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
        h ^= h >> 29;
    }
    unsigned long long w = 0;
    memcpy(&w, p, n);
    h = (h ^ w ^ ((unsigned long long)n << 56)) * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 32);
}

typedef struct { unsigned long long hash; Py_ssize_t len; char text[MAX_CACHED_KEY]; PyObject *key; } CachedKey;
static CachedKey key_cache[KEY_CACHE];

/* A key's str (new reference), from the cache where it is short; NULL with no error: not UTF-8. */
static PyObject *key_of(const char *text, Py_ssize_t len) {
    unsigned long long hash = hash_text(text, len);
    CachedKey *slot = NULL;
    for (int probe = 0; len <= MAX_CACHED_KEY && probe < 8; probe++) {
        slot = &key_cache[(hash + probe) & (KEY_CACHE - 1)];
        if (!slot->key) break;
        if (slot->hash == hash && slot->len == len && memcmp(slot->text, text, len) == 0) {
            Py_INCREF(slot->key);
            return slot->key;
        }
        slot = NULL;
    }
    PyObject *key = PyUnicode_DecodeUTF8(text, len, NULL);
    if (!key) { PyErr_Clear(); return NULL; }
    if (slot) {  /* an empty slot of the key's probe sequence */
        slot->hash = hash; slot->len = len; memcpy(slot->text, text, len);
        slot->key = key;
        Py_INCREF(key);
    }
    return key;
}

/* One sequence's members written before: their text -> annotation bytes, in ``arena``. 20 bytes
 * (the arena kept under 4 GiB), so that more slots share a cache line: most lookups miss it. */
typedef struct { uint32_t hash, text_len, text_at, bytes_at, bytes_len; } Member;
typedef struct MemberCache { Member *slots; Py_ssize_t used, cap, mask; Buf arena; } MemberCache;
/* A sequence's: its raw args' members, and whole raw args (key: the text, value: none) */
typedef struct { MemberCache members, raws; } RawCaches;

static void raw_caches_free(PyObject *capsule) {
    RawCaches *caches = PyCapsule_GetPointer(capsule, "raw_caches");
    if (!caches) return;
    PyMem_Free(caches->members.slots); PyMem_Free(caches->members.arena.data);
    PyMem_Free(caches->raws.slots); PyMem_Free(caches->raws.arena.data);
    PyMem_Free(caches);
}

static int cache_init(MemberCache *cache, Py_ssize_t cap) {
    cache->cap = cap;
    cache->mask = 2 * cap - 1;  /* at most half full */
    return (cache->slots = PyMem_Calloc(2 * cap, sizeof(Member))) ? 0 : -1;
}

/* The sequence's caches (``seq.raw_caches``, made on first use) into ``st``. */
static int raw_caches_of(State *st) {
    PyObject *held = PyObject_GetAttrString(st->seq, "raw_caches");
    if (!held) return -1;
    if (held == Py_None) {
        Py_DECREF(held);
        RawCaches *caches = PyMem_Calloc(1, sizeof(RawCaches));
        if (!caches) { PyErr_NoMemory(); return -1; }
        if (!(held = PyCapsule_New(caches, "raw_caches", raw_caches_free))) { PyMem_Free(caches); return -1; }
        if (cache_init(&caches->members, MAX_INTERNED) < 0 || cache_init(&caches->raws, MAX_RAW_CACHED) < 0) {
            Py_DECREF(held);
            PyErr_NoMemory();
            return -1;
        }
        if (PyObject_SetAttrString(st->seq, "raw_caches", held) < 0) { Py_DECREF(held); return -1; }
    }
    RawCaches *caches = PyCapsule_GetPointer(held, "raw_caches");
    Py_DECREF(held);  /* the sequence holds it */
    if (!caches) return -1;
    st->members = &caches->members;
    st->raws = &caches->raws;
    return 0;
}

/* The text's slot: its own, or the empty one where it goes. */
static Member *member_slot(MemberCache *cache, unsigned long long hash, const char *text, Py_ssize_t text_len) {
    for (Py_ssize_t i = hash & cache->mask;; i = (i + 1) & cache->mask) {
        Member *m = &cache->slots[i];
        if (!m->bytes_len) return m;  /* an annotation is never empty */
        if (m->hash == (uint32_t)hash && m->text_len == text_len &&
            memcmp(cache->arena.data + m->text_at, text, text_len) == 0)
            return m;
    }
}

static int member_remember(MemberCache *cache, Member *slot, unsigned long long hash, const char *text,
                           Py_ssize_t text_len, const char *bytes, Py_ssize_t bytes_len) {
    Buf *arena = &cache->arena;
    if (cache->used >= cache->cap || bytes_len == 0 || arena->len + text_len + bytes_len > UINT32_MAX) return 0;
    Member m = {(uint32_t)hash, (uint32_t)text_len, (uint32_t)arena->len, (uint32_t)(arena->len + text_len),
                (uint32_t)bytes_len};
    if (buf_put(arena, text, text_len) < 0 || buf_put(arena, bytes, bytes_len) < 0) return -1;
    *slot = m;
    cache->used++;
    return 0;
}

enum { J_STRING, J_INT, J_FLOAT, J_TRUE, J_FALSE, J_NULL, J_NESTED };

typedef struct {  /* one member of the object, checked */
    const char *key, *value;   /* their text, without a string's quotes */
    Py_ssize_t key_len, value_len;
    int kind, escaped;
    long long integer;
    double number;
    Py_ssize_t compact_at, compact_len;  /* J_NESTED: its compact text, in the walk's ``compact`` */
} Field;

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static const char *skip_space(const char *p, const char *end) {
    while (p < end && is_space(*p)) p++;
    return p;
}

/* Text with bytes past ASCII: 1 where it is UTF-8 */
static int is_utf8(const char *text, Py_ssize_t len) {
    PyObject *made = PyUnicode_DecodeUTF8(text, len, NULL);
    if (!made) { PyErr_Clear(); return 0; }
    Py_DECREF(made);
    return 1;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* How many of the 8 bytes of a string at ``p`` need no look: before the first quote, backslash,
 * control char or byte past ASCII (a zero byte of ``w ^ c`` sets its high bit in ``(x - ONES) & ~x``;
 * a byte below 0x20 in ``w - 0x20..``, the borrow only ever flagging bytes past one already flagged,
 * so the lowest flag is a true one); 8: none does. Where bytes are not little-endian, a block
 * with any flag counts 0 (looked at byte by byte). */
static int plain_run8(const char *p) {
    unsigned long long w, quote, slash, flags;
    memcpy(&w, p, 8);
    quote = w ^ (ONES * '"');
    slash = w ^ (ONES * '\\');
    flags = (((quote - ONES) & ~quote) | ((slash - ONES) & ~slash) | (w - ONES * 0x20) | w) & HIGHS;
    if (!flags) return 8;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return __builtin_ctzll(flags) >> 3;
#else
    return 0;
#endif
}

/* A JSON string from after its opening quote to past its closing one: 1, or 0 (left to the rule).
 * Its plain runs are skipped 8 bytes at a time, up to the byte that needs a look (an escape every
 * few bytes, ``Input Dims``' \r\n, is reached in a step, not byte by byte); only text past ASCII is
 * decoded, to check it. */
static int check_string(const char **at, const char *end, const char **text, Py_ssize_t *len, int *escaped) {
    const char *p = *at;
    int ascii = 1;
    *escaped = 0;
    for (;;) {
        while (end - p >= 8) {
            int run = plain_run8(p);
            p += run;
            if (run < 8) break;
        }
        if (p >= end) return 0;
        unsigned char c = (unsigned char)*p;
        if (c == '"') break;
        if (c < 0x20) return 0;
        if (c == '\\') {
            if (p + 1 >= end || !strchr("\"\\/bfnrt", p[1]) || !p[1]) return 0;
            *escaped = 1;
            p += 2;
        } else {
            ascii &= c < 0x80;
            p++;
        }
    }
    *text = *at;
    *len = p - *at;
    *at = p + 1;
    return ascii || is_utf8(*text, *len);
}

static const char *digits(const char *p, const char *end) {
    while (p < end && *p >= '0' && *p <= '9') p++;
    return p;
}

static int check_value(const char **at, const char *end, Field *f, Buf *compact);

/* A JSON number: an int of up to 18 digits, or a float (read as float() reads it: past a double,
 * ±inf): 1, or 0 (left to the rule). */
static int check_number(const char **at, const char *end, Field *f) {
    const char *p = *at, *start = p;
    if (p < end && *p == '-') p++;
    const char *first = p;
    if (p < end && *p == '0') p++;
    else if (p < end && *p >= '1' && *p <= '9') p = digits(p, end);
    else return 0;
    f->kind = J_INT;
    if (p < end && *p == '.') {
        const char *frac = ++p;
        if ((p = digits(p, end)) == frac) return 0;
        f->kind = J_FLOAT;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const char *exp = p;
        if ((p = digits(p, end)) == exp) return 0;
        f->kind = J_FLOAT;
    }
    *at = p;
    f->value = start;
    f->value_len = p - start;
    if (f->kind == J_INT) {
        if (p - first > 18) return 0;
        long long v = 0;
        for (const char *q = first; q < p; q++) v = v * 10 + (*q - '0');
        f->integer = *start == '-' ? -v : v;
        return 1;
    }
    char text[64];
    if (p - start >= (Py_ssize_t)sizeof(text)) return 0;
    memcpy(text, start, p - start);
    text[p - start] = '\0';
    char *stop;
    f->number = PyOS_string_to_double(text, &stop, NULL);
    if (f->number == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return stop == text + (p - start);
}

/* A checked string (``text``, ``len`` bytes, no \u escape) as orjson.dumps writes it once decoded:
 * the same text, but for ``\/``, which it writes as ``/``. */
static int compact_string(Buf *out, const char *text, Py_ssize_t len, int escaped) {
    if (buf_reserve(out, len + 2) < 0) return -1;
    char *w = out->data + out->len;
    *w++ = '"';
    if (!escaped) {
        memcpy(w, text, len);
        w += len;
    } else {
        for (const char *q = text, *end = text + len; q < end; q++) {
            if (*q == '\\' && q[1] == '/') continue;  /* the "/" after it is copied next */
            if (*q == '\\') *w++ = *q++;              /* any other escape kept whole */
            *w++ = *q;
        }
    }
    *w++ = '"';
    out->len = w - out->data;
    return 0;
}

#define MAX_NESTED_KEYS 64

/* A nested JSON value (array or object) at ``*at``, checked and its decoded value written into
 * ``out`` as orjson.dumps writes it: compact, for arrays and objects of strings (no \u escapes),
 * ints of up to 18 digits, booleans and nulls; 1, or 0 (left to the rule: floats, whose digits
 * orjson writes by its own rules, repeated keys, deeper than MAX_DEPTH, no JSON). */
static int compact_value(const char **at, const char *end, Buf *out, int depth) {
    const char *p = *at;
    if (p >= end) return 0;
    char open = *p;
    if (open == '"') {
        const char *text;
        Py_ssize_t len;
        int escaped;
        *at = p + 1;
        if (!check_string(at, end, &text, &len, &escaped)) return 0;
        return compact_string(out, text, len, escaped) < 0 ? 0 : 1;
    }
    if (open != '[' && open != '{') {
        Field f;
        if (!check_value(at, end, &f, NULL) || f.kind == J_FLOAT) return 0;
        if (f.kind == J_INT && f.integer == 0) return buf_put(out, "0", 1) < 0 ? 0 : 1;  /* -0 too */
        return buf_put(out, f.value, f.value_len) < 0 ? 0 : 1;
    }
    if (depth >= MAX_DEPTH) return 0;
    char close = open == '[' ? ']' : '}';
    Py_ssize_t keys_at[MAX_NESTED_KEYS], keys_len[MAX_NESTED_KEYS];
    int keys = 0;
    if (buf_put(out, &open, 1) < 0) return 0;
    p = skip_space(p + 1, end);
    if (p < end && *p == close) {
        *at = p + 1;
        return buf_put(out, &close, 1) < 0 ? 0 : 1;
    }
    for (;;) {
        if (open == '{') {  /* a key, its compact text compared with the object's others' */
            Py_ssize_t key_at = out->len;
            if (keys == MAX_NESTED_KEYS || p >= end || *p != '"' || !compact_value(&p, end, out, depth + 1))
                return 0;
            Py_ssize_t key_len = out->len - key_at;
            for (int i = 0; i < keys; i++)
                if (keys_len[i] == key_len && memcmp(out->data + keys_at[i], out->data + key_at, key_len) == 0)
                    return 0;  /* a repeated key: the dict keeps the first's place, the last's value */
            keys_at[keys] = key_at;
            keys_len[keys++] = key_len;
            p = skip_space(p, end);
            if (p >= end || *p != ':' || buf_put(out, ":", 1) < 0) return 0;
            p = skip_space(p + 1, end);
        }
        if (!compact_value(&p, end, out, depth + 1)) return 0;
        p = skip_space(p, end);
        if (p < end && *p == ',') {
            if (buf_put(out, ",", 1) < 0) return 0;
            p = skip_space(p + 1, end);
            continue;
        }
        if (p < end && *p == close) {
            *at = p + 1;
            return buf_put(out, &close, 1) < 0 ? 0 : 1;
        }
        return 0;
    }
}

/* A member's value, checked; a nested one (with ``compact``: at the top) also written compact. */
static int check_value(const char **at, const char *end, Field *f, Buf *compact) {
    const char *p = *at;
    if (p >= end) return 0;
    if (compact && (*p == '[' || *p == '{')) {
        f->kind = J_NESTED;
        f->value = p;
        f->compact_at = compact->len;
        if (!compact_value(at, end, compact, 0)) return 0;
        f->value_len = *at - p;
        f->compact_len = compact->len - f->compact_at;
        return 1;
    }
    static const struct { const char *word; int kind; } words[] = {{"true", J_TRUE}, {"false", J_FALSE}, {"null", J_NULL}};
    for (int i = 0; i < 3; i++) {
        Py_ssize_t n = (Py_ssize_t)strlen(words[i].word);
        if (*p == words[i].word[0]) {
            if (end - p < n || memcmp(p, words[i].word, n) != 0) return 0;
            f->kind = words[i].kind;
            f->value = p;
            f->value_len = n;
            *at = p + n;
            return 1;
        }
    }
    if (*p != '"') return check_number(at, end, f);
    *at = p + 1;
    f->kind = J_STRING;
    return check_string(at, end, &f->value, &f->value_len, &f->escaped);
}

/* Keys of one length seldom share their last byte ("Model Id", "Batch Id"): memcmp only where they do */
static int same_key(const Field *a, const Field *b) {
    Py_ssize_t n = a->key_len;
    return n == b->key_len && (n == 0 || (a->key[n - 1] == b->key[n - 1] && memcmp(a->key, b->key, n) == 0));
}

/* The members of a JSON object, checked (nested ones also written into ``compact``): their count,
 * or -1 (left to the rule; an error set where memory ran out). */
static int check_object(const char *p, const char *end, Field *fields, Buf *compact) {
    int n = 0;
    p = skip_space(p, end);
    if (p >= end || *p++ != '{') return -1;
    p = skip_space(p, end);
    if (p < end && *p == '}') return skip_space(p + 1, end) == end ? 0 : -1;
    for (;;) {
        Field *f = &fields[n];
        int key_escaped;
        if (n == MAX_MEMBERS || p >= end || *p++ != '"' || !check_string(&p, end, &f->key, &f->key_len, &key_escaped) ||
            key_escaped)
            return -1;
        for (int i = 0; i < n; i++)  /* a repeated key: the dict keeps the first's place, the last's value */
            if (same_key(&fields[i], f)) return -1;
        p = skip_space(p, end);
        if (p >= end || *p++ != ':') return -1;
        p = skip_space(p, end);
        if (!check_value(&p, end, f, compact)) return -1;
        n++;
        p = skip_space(p, end);
        if (p < end && *p == ',') { p = skip_space(p + 1, end); continue; }
        if (p < end && *p == '}') return skip_space(p + 1, end) == end ? n : -1;
        return -1;
    }
}

/* A checked string's str: unescaped (\u excepted, which the check refused). New reference. */
static PyObject *string_of(const Field *f, Buf *scratch) {
    if (!f->escaped) return PyUnicode_DecodeUTF8(f->value, f->value_len, NULL);
    scratch->len = 0;
    if (buf_reserve(scratch, f->value_len) < 0) return NULL;
    for (const char *q = f->value; q < f->value + f->value_len; q++) {
        char c = *q;
        if (c == '\\') {
            switch (*++q) {
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            default: c = *q;  /* " \ / */
            }
        }
        scratch->data[scratch->len++] = c;
    }
    return PyUnicode_DecodeUTF8(scratch->data, scratch->len, NULL);
}

static PyObject *value_of(const Field *f, Buf *scratch) {
    switch (f->kind) {
    case J_STRING: return string_of(f, scratch);
    case J_INT: return PyLong_FromLongLong(f->integer);
    case J_FLOAT: return PyFloat_FromDouble(f->number);
    case J_TRUE: Py_RETURN_TRUE;
    case J_FALSE: Py_RETURN_FALSE;
    default: Py_RETURN_NONE;
    }
}

/* A number's or bool's annotation, written as put_annotation writes one, with its name's
 * reference remembered by the key's text alone (a member's text holds the key's closing quote,
 * which a key's never does: no member's). */
static int put_number(State *st, Buf *b, const Field *f) {
    MemberCache *cache = st->members;
    unsigned long long hash = hash_text(f->key, f->key_len);
    Member *slot = member_slot(cache, hash, f->key, f->key_len);
    PyObject *made = NULL;
    if (!slot->bytes_len) {
        PyObject *key = key_of(f->key, f->key_len);
        if (!key) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a key checked as UTF-8 was not");
            return -1;
        }
        made = ref(st, &st->arg_names, key);
        Py_DECREF(key);
        if (!made || member_remember(cache, slot, hash, f->key, f->key_len, PyBytes_AS_STRING(made),
                                     PyBytes_GET_SIZE(made)) < 0) {
            Py_XDECREF(made);
            return -1;
        }
    }
    const char *name = made ? PyBytes_AS_STRING(made) : cache->arena.data + slot->bytes_at;
    Py_ssize_t name_len = made ? PyBytes_GET_SIZE(made) : slot->bytes_len, value_len = 0;
    unsigned char scalar[11];
    if (f->kind == J_TRUE || f->kind == J_FALSE) {
        scalar[value_len++] = K_A_BOOL;
        scalar[value_len++] = f->kind == J_TRUE;
    } else if (f->kind == J_INT) {
        unsigned long long v = (unsigned long long)f->integer;
        scalar[value_len++] = K_A_INT;
        while (v >= 0x80) { scalar[value_len++] = (unsigned char)(v | 0x80); v >>= 7; }
        scalar[value_len++] = (unsigned char)v;
    } else {
        unsigned long long v;
        memcpy(&v, &f->number, 8);
        scalar[value_len++] = K_A_DOUBLE;
        for (int i = 0; i < 8; i++) scalar[value_len++] = (unsigned char)(v >> (8 * i));
    }
    int rc = buf_put(b, "\x22", 1) || buf_varint(b, name_len + value_len) || buf_put(b, name, name_len) ||
             buf_put(b, (const char *)scalar, value_len);
    Py_XDECREF(made);
    return rc ? -1 : 0;
}

static int put_field(State *st, Buf *b, const Field *f, Buf *scratch, const Buf *compact) {
    if (f->kind == J_NULL) return 0;  /* None: left out */
    /* a number, small int or not, or a bool, as put_annotation would write it: with its text
     * remembered, ids (``correlation_id``) would fill the cache, and those past it go through
     * Python objects */
    if (f->kind != J_STRING && f->kind != J_NESTED) return put_number(st, b, f);
    /* a string or nested value, constant on a sequence: remembered by the member's JSON text from
     * its key to the end of its value, a string's with its closing quote (the string "5" is no 5):
     * one text, hashed and compared once */
    const char *text = f->key;
    Py_ssize_t text_len = f->value + f->value_len + (f->kind == J_STRING) - f->key;
    int nested = f->kind == J_NESTED;
    unsigned long long hash = hash_text(text, text_len);
    Member *slot = member_slot(st->members, hash, text, text_len);
    if (slot->bytes_len) return buf_put(b, st->members->arena.data + slot->bytes_at, slot->bytes_len);
    PyObject *key = key_of(f->key, f->key_len), *value = NULL;
    if (key)  /* a nested value: its compact JSON text, a string (as _annotation writes it) */
        value = nested ? PyUnicode_DecodeUTF8(compact->data + f->compact_at, f->compact_len, NULL)
                       : value_of(f, scratch);
    if (!key || !value) {
        Py_XDECREF(key);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "args checked as UTF-8 were not");
        return -1;
    }
    Py_ssize_t start = b->len;
    int rc = nested ? put_text(st, b, key, value) : put_annotation(st, b, key, value);
    Py_DECREF(key); Py_DECREF(value);
    if (rc == 0)
        rc = member_remember(st->members, slot, hash, text, text_len, b->data + start, b->len - start);
    return rc;
}

/* ``raw``'s annotations without a dict: 1 written, 0 left to the rule, -1 error. */
static int walk_args(State *st, Buf *b, PyObject *raw) {
    Field fields[MAX_MEMBERS];
    const char *text = PyBytes_AS_STRING(raw);
    Buf scratch = {0}, compact = {0};  /* unescaped strings; nested values' compact texts */
    int n = check_object(text, text + PyBytes_GET_SIZE(raw), fields, &compact), rc = 1;
    if (n < 0) rc = PyErr_Occurred() ? -1 : 0;
    for (int i = 0; i < n && rc > 0; i++)
        if (put_field(st, b, &fields[i], &scratch, &compact) < 0) rc = -1;
    PyMem_Free(scratch.data);
    PyMem_Free(compact.data);
    return rc;
}

/* A slice's args: a dict, or raw JSON (bytes, msgspec.Raw) decoded now, encoded once per text. */
static int put_args(State *st, Buf *b, PyObject *args) {
    if (PyDict_CheckExact(args)) return put_dict(st, b, args);
    PyObject *raw = PyBytes_CheckExact(args) ? (Py_INCREF(args), args) : PyObject_Bytes(args);
    if (!raw || (!st->raws && raw_caches_of(st) < 0)) { Py_XDECREF(raw); return -1; }
    const char *text = PyBytes_AS_STRING(raw);
    Py_ssize_t len = PyBytes_GET_SIZE(raw), start = b->len;  /* encoded into ``b``, remembered from there */
    unsigned long long hash = hash_text(text, len);
    Member *slot = member_slot(st->raws, hash, text, len);
    int rc;
    if (slot->bytes_len) {
        rc = buf_put(b, st->raws->arena.data + slot->bytes_at, slot->bytes_len);
    } else {
        rc = walk_args(st, b, raw);
        if (rc == 0) rc = put_decoded(st, b, raw);
        else if (rc > 0) rc = 0;
        if (rc == 0) rc = member_remember(st->raws, slot, hash, text, len, b->data + start, b->len - start);
    }
    Py_DECREF(raw);
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
    if (has_args < 0 || (has_args && put_args(st, body, args) < 0)) return -1;
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
    if (put_args(&st, &out, argv[1]) == 0) result = PyBytes_FromStringAndSize(out.data ? out.data : "", out.len);
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
