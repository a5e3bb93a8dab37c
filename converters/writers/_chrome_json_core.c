/* The Chrome JSON writer's per-event loop (chrome_json.ChromeJsonEncoder.chunk) in C: the bytes
 * orjson wrote for each record, without a dict and an orjson call per slice (a fifth of a
 * summary conversion to JSON) or per counter value (a fifth of a detail one of torch_npu's
 * trace_view.json, where 44% of the events are counters). What is rare or stateful stays in
 * Python: a thread's number and the metadata naming it (``tid_of``, once per track and chunk),
 * dict args, numbers orjson writes its own way and times past 10**15 ns (``dumps``, orjson
 * itself). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#include "../_buffer.h"
#include "../records.h"

#define PUT(b, literal) buf_put(b, literal, sizeof(literal) - 1)

static int put_bytes(Buf *b, PyObject *bytes) {  /* steals the reference; NULL: an error */
    if (!bytes) return -1;
    int rc = PyBytes_Check(bytes) ? buf_put(b, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes)) : -1;
    if (rc < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "expected bytes");
    Py_DECREF(bytes);
    return rc;
}

/* A str as orjson writes it: UTF-8, with ", \ and control characters escaped */
static int put_str(Buf *b, PyObject *text, PyObject *dumps) {
    Py_ssize_t n;
    const char *utf8 = PyUnicode_Check(text) ? PyUnicode_AsUTF8AndSize(text, &n) : NULL;
    if (!utf8) {  /* not a str, or not UTF-8: orjson says what is wrong */
        PyErr_Clear();
        return put_bytes(b, PyObject_CallOneArg(dumps, text));
    }
    static const char hex[] = "0123456789abcdef";
    if (buf_reserve(b, 6 * n + 2) < 0) return -1;
    char *out = b->data + b->len;
    *out++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)utf8[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *out++ = (char)c;
            continue;
        }
        *out++ = '\\';
        switch (c) {
        case '"': *out++ = '"'; break;
        case '\\': *out++ = '\\'; break;
        case '\b': *out++ = 'b'; break;
        case '\t': *out++ = 't'; break;
        case '\n': *out++ = 'n'; break;
        case '\f': *out++ = 'f'; break;
        case '\r': *out++ = 'r'; break;
        default: *out++ = 'u'; *out++ = '0'; *out++ = '0'; *out++ = hex[c >> 4]; *out++ = hex[c & 15];
        }
    }
    *out++ = '"';
    b->len = out - b->data;
    return 0;
}

#define EXACT_NS 1000000000000000LL  /* 10**15: chrome_json.EXACT_NS */

/* ns from the origin, 128-bit: a rank's times lie within ±2**62 ns (model.checked_ns), so they
 * can be ~2**63 ns apart, and its origin is an hour or more before its first */
typedef __int128 Wide;

/* ns from the origin (or a duration) as JSON holds them for Perfetto, which reads them as doubles:
 * to the ns below EXACT_NS, to the µs (rounded down) from there on, where a double holds no ns.
 * Starts and ends rounded alike keep their order, so slices still nest and touch (but in the last
 * µs of a slice of 11 days and more, whose duration is rounded down too). */
static Wide held(Wide ns) { return ns < EXACT_NS ? ns : ns - ns % 1000; }

/* ns as µs, the float ``ns / 1000`` as orjson writes it. Below 10**15 ns the exact decimal has
 * at most 15 digits, so it is the shortest text of that float: written from the int. */
static int put_us(Buf *b, Wide ns, PyObject *dumps) {
    if (ns > -EXACT_NS && ns < EXACT_NS) {
        char text[32], *end = text + 24, *at;
        unsigned long long magnitude = ns < 0 ? (unsigned long long)-ns : (unsigned long long)ns;
        unsigned fraction = (unsigned)(magnitude % 1000);
        at = digits_before(end, magnitude / 1000);
        if (ns < 0) *--at = '-';
        *end++ = '.';
        *end++ = (char)('0' + fraction / 100);
        if (fraction % 100) *end++ = (char)('0' + fraction / 10 % 10);
        if (fraction % 10) *end++ = (char)('0' + fraction % 10);
        return buf_put(b, at, end - at);
    }
    PyObject *big = _PyLong_FromByteArray((const unsigned char *)&ns, sizeof ns, PY_LITTLE_ENDIAN, 1);
    PyObject *thousand = big ? PyLong_FromLong(1000) : NULL;
    PyObject *us = thousand ? PyNumber_TrueDivide(big, thousand) : NULL;
    Py_XDECREF(big); Py_XDECREF(thousand);
    if (!us) return -1;
    int rc = put_bytes(b, PyObject_CallOneArg(dumps, us));
    Py_DECREF(us);
    return rc;
}

/* PyLong_AsLongLong converts through _PyLong_AsByteArray (slow for epoch ns); this one does not */
static int long_of(PyObject *value, long long *out) {
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) PyErr_SetString(PyExc_OverflowError, "an int past 64 bits");
    return overflow || (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Remembered within a chunk: each track's thread (tracks are shared by the events of a lane) */
#define TRACK_SLOTS 256
typedef struct { PyObject *track; long long tid; } TrackSlot;

static int tid_for(PyObject *track, TrackSlot *slots, PyObject *tid_of, Buf *b, long long *tid) {
    size_t h = ((size_t)track >> 4) % TRACK_SLOTS;
    TrackSlot *free = NULL;  /* where the track goes once known (NULL: every slot taken) */
    for (int k = 0; k < TRACK_SLOTS && !free; k++) {
        TrackSlot *slot = &slots[(h + k) % TRACK_SLOTS];
        if (slot->track == track) {
            *tid = slot->tid;
            return 0;
        }
        if (!slot->track) free = slot;
    }
    PyObject *found = PyObject_CallOneArg(tid_of, track);  /* (tid, the metadata naming it) */
    if (!found) return -1;
    int rc = -1;
    if (PyTuple_Check(found) && PyTuple_GET_SIZE(found) == 2 && long_of(PyTuple_GET_ITEM(found, 0), tid) == 0)
        rc = put_bytes(b, Py_NewRef(PyTuple_GET_ITEM(found, 1)));
    else if (!PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "tid_of must give (tid, bytes)");
    Py_DECREF(found);
    if (rc == 0 && free) {
        free->track = track;  /* borrowed: the events hold it for the call */
        free->tid = *tid;
    }
    return rc;
}

/* The arrows of a slice, at its start: {"ph":"s","id":"<hex>","bp":"e","pid":..,"tid":..,"ts":..,
 * "cat":"flow","name":"flow"} */
static int put_flows(Buf *b, PyObject *flows, const char *phase, long long pid, long long tid, Wide ns,
                     PyObject *dumps) {
    if (!PyTuple_Check(flows)) { PyErr_SetString(PyExc_TypeError, "flows must be a tuple"); return -1; }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(flows); i++) {
        unsigned long long id = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(flows, i));
        if (id == (unsigned long long)-1 && PyErr_Occurred()) return -1;
        char hex[16], *at = hex + sizeof hex;
        do *--at = "0123456789abcdef"[id & 15]; while (id >>= 4);
        if (PUT(b, ",\n{\"ph\":\"") < 0 || buf_put(b, phase, 1) < 0 || PUT(b, "\",\"id\":\"") < 0 ||
            buf_put(b, at, hex + sizeof hex - at) < 0 || PUT(b, "\",\"bp\":\"e\",\"pid\":") < 0 || buf_decimal(b, pid) < 0 ||
            PUT(b, ",\"tid\":") < 0 || buf_decimal(b, tid) < 0 || PUT(b, ",\"ts\":") < 0 || put_us(b, ns, dumps) < 0 ||
            PUT(b, ",\"cat\":\"flow\",\"name\":\"flow\"}") < 0)
            return -1;
    }
    return 0;
}

/* A counter's value as orjson writes it: an int of 64 bits in decimal; a float of 0 or of 1e-4 to
 * 1e16 as Python's repr, which writes there the shortest digits orjson writes, as orjson does
 * (outside, the two differ: orjson writes 1e-5 as 0.00001, repr as 1e-05); anything else
 * (bools, bigger ints, other floats, NaN, a subclass) by orjson itself. */
static int put_number(Buf *b, PyObject *value, PyObject *dumps) {
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (!overflow) return buf_decimal(b, v);  /* an exact int: never an error */
    } else if (PyFloat_CheckExact(value)) {
        double x = PyFloat_AS_DOUBLE(value), magnitude = fabs(x);
        if (x == 0.0 || (magnitude >= 1e-4 && magnitude < 1e16)) {
            char *text = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
            if (!text) return -1;
            int rc = buf_put(b, text, (Py_ssize_t)strlen(text));
            PyMem_Free(text);
            return rc;
        }
    }
    return put_bytes(b, PyObject_CallOneArg(dumps, value));
}

/* The earliest and the latest time of the events written so far */
typedef struct { long long earliest, latest; } Span;

static void span_add(Span *span, long long start, long long end) {
    if (start < span->earliest) span->earliest = start;
    if (end > span->latest) span->latest = end;
}

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* The end of the string that starts at ``open`` (its closing quote's next byte, or ``end``): the
 * first quote after it not escaped, one an even run of backslashes precedes */
static const char *string_end(const char *open, const char *end) {
    for (const char *q = open + 1; (q = memchr(q, '"', end - q)); q++) {
        const char *k = q;
        while (k > open + 1 && k[-1] == '\\') k--;
        if (!((q - k) & 1)) return q + 1;
    }
    return end;
}

/* Raw JSON args as they came in, less JSON's white space outside strings (Kineto indents its args
 * over lines: 7% of a trace, and the trace processor parses every byte). White space is dropped only
 * after ``{[,:`` or before ``}],:``, where valid JSON has nothing to join; any other (text that is no
 * JSON) goes out as it came. */
static int put_compact(Buf *b, const char *src, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    char *const first = b->data + b->len;
    char *out = first;
    const char *end = src + n;
    while (src < end) {
        const char *p = src;
        while (p < end && *p != '"' && !is_space(*p)) p++;
        if (p < end && *p == '"') p = string_end(p, end);  /* a string, escapes and all, as it is */
        memcpy(out, src, p - src);
        out += p - src;
        if (p == end || !is_space(*p)) {
            src = p;
            continue;
        }
        for (src = p; p < end && is_space(*p); p++) {}
        char before = out > first ? out[-1] : '{', after = p < end ? *p : '}';
        if (!memchr("{[,:", before, 4) && !memchr("}],:", after, 4)) {
            memcpy(out, src, p - src);
            out += p - src;
        }
        src = p;
    }
    b->len = out - b->data;
    return 0;
}

/* One slice: {"ph":"X","pid":..,"tid":..,"name":..,"ts":..,"dur":..[,"args":..]} and its arrows */
static int put_slice(Buf *b, PyObject *track, PyObject *s, long long origin, Span *span, TrackSlot *slots,
                     PyObject *tid_of, PyObject *dumps) {
    long long rank, start, dur, pid, tid, end;
    if (!PyTuple_Check(track) || PyTuple_GET_SIZE(track) <= TRACK_RANK || !PyTuple_Check(s) ||
        PyTuple_GET_SIZE(s) != SLICE_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "a Begin of a Track and a Slice");
        return -1;
    }
    if (long_of(PyTuple_GET_ITEM(track, TRACK_RANK), &rank) < 0 ||
        long_of(PyTuple_GET_ITEM(s, SLICE_START_NS), &start) < 0 ||
        long_of(PyTuple_GET_ITEM(s, SLICE_DUR_NS), &dur) < 0 || tid_for(track, slots, tid_of, b, &tid) < 0)
        return -1;
    pid = rank + 1;
    span_add(span, start, __builtin_add_overflow(start, dur, &end) ? LLONG_MAX : end);
    Wide from_origin = (Wide)start - origin, ts = held(from_origin);
    Wide length = held(held(from_origin + dur) - ts);
    if (PUT(b, ",\n{\"ph\":\"X\",\"pid\":") < 0 || buf_decimal(b, pid) < 0 || PUT(b, ",\"tid\":") < 0 ||
        buf_decimal(b, tid) < 0 || PUT(b, ",\"name\":") < 0 || put_str(b, PyTuple_GET_ITEM(s, SLICE_NAME), dumps) < 0 ||
        PUT(b, ",\"ts\":") < 0 || put_us(b, ts, dumps) < 0 ||
        PUT(b, ",\"dur\":") < 0 || put_us(b, length, dumps) < 0)
        return -1;
    PyObject *args = PyTuple_GET_ITEM(s, SLICE_ARGS);
    int has_args = PyObject_IsTrue(args);
    if (has_args < 0) return -1;
    if (has_args) {  /* raw JSON from the reader goes out as it came in, never decoded (compacted) */
        if (PUT(b, ",\"args\":") < 0) return -1;
        if (PyDict_Check(args)) {
            if (put_bytes(b, PyObject_CallOneArg(dumps, args)) < 0) return -1;
        } else {
            Py_buffer view;
            if (PyObject_GetBuffer(args, &view, PyBUF_SIMPLE) < 0) return -1;
            int rc = put_compact(b, view.buf, view.len);
            PyBuffer_Release(&view);
            if (rc < 0) return -1;
        }
    }
    if (PUT(b, "}") < 0) return -1;
    /* To the µs (past EXACT_NS), an arrow's two ends less than a µs apart are one time, and the
     * trace processor takes events of one time in file order: an end written before its start
     * (its rank's slices first) is dropped (flow_end_without_start). So there an end binds a µs
     * into its slice, after any start rounded down to the slice's start, where the slice lasts
     * long enough to still hold it. */
    Wide into = ts >= EXACT_NS && length >= 2000 ? ts + 1000 : ts;
    return put_flows(b, PyTuple_GET_ITEM(s, SLICE_FLOWS_OUT), "s", pid, tid, ts, dumps) < 0 ||
           put_flows(b, PyTuple_GET_ITEM(s, SLICE_FLOWS_IN), "f", pid, tid, into, dumps) < 0 ? -1 : 0;
}

/* -- counter values: one C event for the values that share a time and a series name ------------
 * The trace processor names a C event's series "<name> <arg key>", and its cost is per event, not
 * per value (323k single-value events were a third of its load of a torch_npu rank's JSON). So a
 * lane "<name> <key>", split at its last space, is written as that name and key: the series read
 * back is the lane, as the Perfetto writer names it; and the values of one rank's lanes of one name
 * at one time go out as one event, the k-th value of each lane at that time with the k-th of the
 * others (a lane may hold several values at one time: one per accelerator). A lane without a space
 * is its own series, key "value". Emitted after the chunk's slices, by name (in the order of each
 * one's first value), time, k, and the order of the values; tests/test_chrome_json_writer.py's
 * reference_chunk is the rule in Python. */

typedef struct {
    PyObject *track;       /* borrowed: the chunk's events hold it */
    PyObject *name, *key;  /* owned */
    long long pid;
    Py_ssize_t group;      /* the first lane of its pid and name */
} Lane;

typedef struct {
    long long ts;
    Py_ssize_t group, lane, nth, at;
    PyObject *value;  /* borrowed */
} Sample;

typedef struct {
    Lane *lanes;
    Py_ssize_t lanes_n, lanes_cap, last;
    Sample *samples;
    Py_ssize_t n, cap;
} Counters;

#define MOST_KEYS 64  /* values one event holds at most */

static void counters_free(Counters *c) {
    for (Py_ssize_t i = 0; i < c->lanes_n; i++) {
        Py_DECREF(c->lanes[i].name);
        Py_DECREF(c->lanes[i].key);
    }
    PyMem_Free(c->lanes);
    PyMem_Free(c->samples);
}

static int grow(void **items, Py_ssize_t *cap, Py_ssize_t n, size_t size) {
    if (n < *cap) return 0;
    Py_ssize_t more = *cap ? 2 * *cap : 64;
    void *grown = PyMem_Realloc(*items, (size_t)more * size);
    if (!grown) { PyErr_NoMemory(); return -1; }
    *items = grown;
    *cap = more;
    return 0;
}

/* The index of a Value's track among the chunk's lanes, a new one named at its last space */
static Py_ssize_t lane_of(Counters *c, PyObject *track) {
    if (c->last >= 0 && c->lanes[c->last].track == track) return c->last;  /* a lane's values come together */
    for (Py_ssize_t i = 0; i < c->lanes_n; i++)
        if (c->lanes[i].track == track) return c->last = i;
    long long rank;
    if (!PyTuple_Check(track) || PyTuple_GET_SIZE(track) <= TRACK_LANE ||
        !PyUnicode_Check(PyTuple_GET_ITEM(track, TRACK_LANE))) {
        PyErr_SetString(PyExc_TypeError, "a Value of a Track");
        return -1;
    }
    if (long_of(PyTuple_GET_ITEM(track, TRACK_RANK), &rank) < 0 ||
        grow((void **)&c->lanes, &c->lanes_cap, c->lanes_n, sizeof(Lane)) < 0)
        return -1;
    PyObject *text = PyTuple_GET_ITEM(track, TRACK_LANE), *name, *key;
    Py_ssize_t length = PyUnicode_GET_LENGTH(text), space = PyUnicode_FindChar(text, ' ', 0, length, -1);
    if (space == -2) return -1;
    if (space > 0) {
        name = PyUnicode_Substring(text, 0, space);
        key = name ? PyUnicode_Substring(text, space + 1, length) : NULL;
    } else {
        name = Py_NewRef(text);
        key = PyUnicode_FromString("value");
    }
    if (!key) {
        Py_XDECREF(name);
        return -1;
    }
    Lane *lane = &c->lanes[c->lanes_n];
    *lane = (Lane){track, name, key, rank + 1, c->lanes_n};
    for (Py_ssize_t i = 0; i < c->lanes_n; i++) {
        if (c->lanes[i].pid == lane->pid && PyUnicode_Compare(c->lanes[i].name, name) == 0) {
            lane->group = c->lanes[i].group;
            break;
        }
    }
    return c->last = c->lanes_n++;
}

static int add_value(Counters *c, PyObject *event, long long ts) {
    Py_ssize_t lane = lane_of(c, PyTuple_GET_ITEM(event, VALUE_TRACK));
    if (lane < 0 || grow((void **)&c->samples, &c->cap, c->n, sizeof(Sample)) < 0) return -1;
    c->samples[c->n] = (Sample){ts, c->lanes[lane].group, lane, 0, c->n, PyTuple_GET_ITEM(event, VALUE_VALUE)};
    c->n++;
    return 0;
}

#define ORDER(x, y) if ((x) != (y)) return (x) < (y) ? -1 : 1
static int by_lane(const void *a, const void *b) {
    const Sample *p = a, *q = b;
    ORDER(p->lane, q->lane);
    ORDER(p->ts, q->ts);
    ORDER(p->at, q->at);
    return 0;
}

static int by_event(const void *a, const void *b) {
    const Sample *p = a, *q = b;
    ORDER(p->group, q->group);
    ORDER(p->ts, q->ts);
    ORDER(p->nth, q->nth);
    ORDER(p->at, q->at);
    return 0;
}

/* Whether the event open (its lanes ``keyed``) can take a value of ``lane``: a key it lacks */
static int takes(Counters *c, const Py_ssize_t *keyed, int keys, Py_ssize_t lane) {
    if (keys >= MOST_KEYS) return 0;
    for (int k = 0; k < keys; k++)
        if (PyUnicode_Compare(c->lanes[keyed[k]].key, c->lanes[lane].key) == 0) return 0;
    return 1;
}

/* The chunk's values as C events: {"ph":"C","pid":..,"name":<name>,"ts":..,"args":{<key>:<value>,..}} */
static int put_counters(Buf *b, Counters *c, long long origin, PyObject *dumps) {
    Sample *s = c->samples;
    qsort(s, (size_t)c->n, sizeof *s, by_lane);
    for (Py_ssize_t i = 1; i < c->n; i++)
        if (s[i].lane == s[i - 1].lane && s[i].ts == s[i - 1].ts) s[i].nth = s[i - 1].nth + 1;
    qsort(s, (size_t)c->n, sizeof *s, by_event);
    Py_ssize_t keyed[MOST_KEYS], open = -1;
    int keys = 0;
    for (Py_ssize_t i = 0; i < c->n; i++) {
        Lane *lane = &c->lanes[s[i].lane];
        int joins = open >= 0 && s[i].group == s[open].group && s[i].ts == s[open].ts && s[i].nth == s[open].nth &&
                    takes(c, keyed, keys, s[i].lane);
        if (joins) {
            if (PUT(b, ",") < 0) return -1;
        } else {
            if ((open >= 0 && PUT(b, "}}") < 0) || PUT(b, ",\n{\"ph\":\"C\",\"pid\":") < 0 ||
                buf_decimal(b, lane->pid) < 0 || PUT(b, ",\"name\":") < 0 || put_str(b, lane->name, dumps) < 0 ||
                PUT(b, ",\"ts\":") < 0 ||
                put_us(b, held((Wide)s[i].ts - origin), dumps) < 0 || PUT(b, ",\"args\":{") < 0)
                return -1;
            open = i;
            keys = 0;
        }
        if (put_str(b, lane->key, dumps) < 0 || PUT(b, ":") < 0 || put_number(b, s[i].value, dumps) < 0) return -1;
        keyed[keys++] = s[i].lane;
    }
    return open >= 0 ? PUT(b, "}}") : 0;
}

/* The slices of a layout.Placement (tracks, slices, codes: per event (position * 2 [+ 1 for an
 * end], slice index or -1, time)), each as put_slice puts a Begin's; ends need nothing */
static int put_placed(Buf *b, PyObject *tracks, PyObject *slices, PyObject *codes, long long origin, Span *span,
                      TrackSlot *slots, PyObject *tid_of, PyObject *dumps, Py_ssize_t *timed) {
    if (!PyList_CheckExact(tracks) || !PyList_CheckExact(slices) || !PyBytes_CheckExact(codes) ||
        PyBytes_GET_SIZE(codes) % (3 * sizeof(long long))) {
        PyErr_SetString(PyExc_TypeError, "a Placement: tracks, slices (lists), codes (bytes)");
        return -1;
    }
    const long long *code = (const long long *)PyBytes_AS_STRING(codes);
    Py_ssize_t n = PyBytes_GET_SIZE(codes) / sizeof(long long);
    for (Py_ssize_t at = 0; at < n; at += 3) {
        long long kind = code[at], what = code[at + 1], position = kind >> 1;
        if (kind & 1) continue;
        if (position < 0 || position >= PyList_GET_SIZE(tracks) || what < 0 || what >= PyList_GET_SIZE(slices)) {
            PyErr_SetString(PyExc_IndexError, "a Placement's code past its tracks or slices");
            return -1;
        }
        if (put_slice(b, PyList_GET_ITEM(tracks, position), PyList_GET_ITEM(slices, what), origin, span, slots,
                      tid_of, dumps) < 0)
            return -1;
        ++*timed;
    }
    return 0;
}

/* encode_chunk(events, origin_ns, tid_of, dumps, Begin, Value) -> (bytes, earliest, latest):
 * each Begin as an X event (and its arrows), then the Values as C events (put_counters), every
 * record after ",\n"; and the earliest start and latest end written (None, None: no event), which
 * the writer checks against its origin. ``events``: a sequence of layout events, or a layout.Placement
 * (tracks, slices, codes, values). */
static PyObject *encode_chunk(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 6) {
        PyErr_SetString(PyExc_TypeError, "encode_chunk(events, origin_ns, tid_of, dumps, Begin, Value)");
        return NULL;
    }
    long long origin, ts;
    Span span = {LLONG_MAX, LLONG_MIN};
    Py_ssize_t timed = 0;  /* Begins and Values: the events that have a time in the output */
    if (long_of(argv[1], &origin) < 0) return NULL;
    PyObject *events = argv[0], *out = NULL, *data;
    TrackSlot *slots = PyMem_Calloc(TRACK_SLOTS, sizeof(TrackSlot));
    Counters counters = {.last = -1};
    Buf b = {0};
    if (!slots) return PyErr_NoMemory();
    if (PyTuple_Check(events) && PyTuple_GET_SIZE(events) == PLACEMENT_FIELDS &&
        PyBytes_Check(PyTuple_GET_ITEM(events, PLACEMENT_CODES))) {  /* no event is bytes */
        if (put_placed(&b, PyTuple_GET_ITEM(events, PLACEMENT_TRACKS), PyTuple_GET_ITEM(events, PLACEMENT_SLICES),
                       PyTuple_GET_ITEM(events, PLACEMENT_CODES), origin, &span, slots, argv[2], argv[3],
                       &timed) < 0) {
            PyMem_Free(slots);
            PyMem_Free(b.data);
            return NULL;
        }
        events = PyTuple_GET_ITEM(events, PLACEMENT_VALUES);
    }
    if (!(events = PySequence_Fast(events, "events must be a sequence"))) {
        PyMem_Free(slots);
        PyMem_Free(b.data);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(events); i++) {
        PyObject *event = PySequence_Fast_GET_ITEM(events, i);
        int rc = 0;
        if (Py_IS_TYPE(event, (PyTypeObject *)argv[4]) && PyTuple_GET_SIZE(event) == BEGIN_FIELDS) {
            rc = put_slice(&b, PyTuple_GET_ITEM(event, BEGIN_TRACK), PyTuple_GET_ITEM(event, BEGIN_SLICE), origin,
                           &span, slots, argv[2], argv[3]);
            timed++;
        } else if (Py_IS_TYPE(event, (PyTypeObject *)argv[5]) && PyTuple_GET_SIZE(event) == VALUE_FIELDS) {
            if (long_of(PyTuple_GET_ITEM(event, VALUE_TS_NS), &ts) < 0) goto done;
            span_add(&span, ts, ts);
            timed++;
            rc = add_value(&counters, event, ts);
        }  /* an End: an X event carries its duration */
        if (rc < 0) goto done;
    }
    if (put_counters(&b, &counters, origin, argv[3]) < 0) goto done;
    data = PyBytes_FromStringAndSize(b.data ? b.data : "", b.len);
    if (data)
        out = timed ? Py_BuildValue("(NLL)", data, span.earliest, span.latest)
                    : Py_BuildValue("(NOO)", data, Py_None, Py_None);
done:
    Py_DECREF(events);
    counters_free(&counters);
    PyMem_Free(slots);
    PyMem_Free(b.data);
    return out;
}

static PyMethodDef methods[] = {
    {"encode_chunk", (PyCFunction)(void (*)(void))encode_chunk, METH_FASTCALL,
     "encode_chunk(events, origin_ns, tid_of, dumps, Begin, Value) -> (the chunk's JSON records, "
     "their earliest start and latest end, or None, None)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_chrome_json_core", .m_doc = "The Chrome JSON writer's per-event loop.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__chrome_json_core(void) { return PyModule_Create(&module); }
