/* events.batches in C: a batch of events scanned, not decoded (scan, RawEvents), and the JSON
 * text a scanned event's fields hold read as msgspec would decode it.
 *
 * msgspec makes an Event of nine objects for every event, and most events are then left out at
 * once (the vendor's overlap lanes; host events and tasks that do not compute, in a summary).
 * ``scan`` checks a batch as JSON and notes where each event's fields lie in its text; read_events
 * and steps_and_names (chrome_trace.c), and memory_events (Kineto's [memory] events, below), make
 * objects only for what they keep, by the same rules.
 * Only what is plain is scanned: keys without escapes, each field once and of the type Event takes
 * (typed_as_event), numbers of ordinary size, no lone surrogate escapes, nesting under 64 deep;
 * anything else gives None, and msgspec decodes the batch (with its rules and its errors). An event
 * that Python reads is decoded by msgspec from its own text, so it is the Event the batch would
 * have given. The rule: msgspec's decoding of events.Event (events.batches); held to it by
 * tests/readers/test_chrome_trace.py (scanned batches against decoded ones). */
#include "core.h"

#include <math.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>  /* x86-64's baseline: every such CPU has it */
#endif

typedef struct { const unsigned char *p, *end; } Scan;
#define MAX_DEPTH 64

static unsigned char SPACE[256];  /* 1 for the bytes JSON takes as whitespace: space, LF, CR, tab */

static inline void sc_ws(Scan *s) {
    const unsigned char *p = s->p, *end = s->end;
    while (p < end && SPACE[*p]) p++;
    s->p = p;
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

/* The first byte from p on that is not ORDINARY (or end): 16 bytes a test where SSE2 is */
static inline const unsigned char *past_ordinary(const unsigned char *p, const unsigned char *end) {
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), control = _mm_set1_epi8(0x1f);
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                    _mm_cmpeq_epi8(_mm_min_epu8(v, control), v));  /* v <= 0x1f */
        int mask = _mm_movemask_epi8(stop);
        if (mask) return p + __builtin_ctz(mask);
        p += 16;
    }
#endif
    while (p < end && ORDINARY[*p]) p++;
    return p;
}

static inline __attribute__((always_inline)) int sc_string(Scan *s) {  /* inlined: +8% scanned/s */
    const unsigned char *p = s->p + 1, *end = s->end;
    int kind = K_STR;
    for (;;) {
        p = past_ordinary(p, end);
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

/* scan(data, decode_event, decode_value, decode_time=None) -> RawEvents, or None: see above. ``data``
 * is a JSON array of event objects; ``decode_time``, where given, decodes ts and dur (Kineto's
 * float_hook=str: a float stays its text, which C reads as times.us_to_ns reads a str). The rule:
 * msgspec's decoding of events.Event (events.batches) by the dialect's decoder. */
static PyObject *scan(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 3 && argc != 4) {
        PyErr_SetString(PyExc_TypeError, "scan(data, decode_event, decode_value, decode_time=None)");
        return NULL;
    }
    if (!PyBytes_CheckExact(argv[0]) || PyBytes_GET_SIZE(argv[0]) >= (Py_ssize_t)UINT32_MAX) Py_RETURN_NONE;
    Py_ssize_t length = PyBytes_GET_SIZE(argv[0]);
    RawEvents *r = PyObject_New(RawEvents, &RawEventsType);
    if (!r) return NULL;
    r->data = Py_NewRef(argv[0]);
    r->decode_event = Py_NewRef(argv[1]);
    r->decode_value = Py_NewRef(argv[2]);
    r->decode_time = argc == 4 && argv[3] != Py_None ? Py_NewRef(argv[3]) : NULL;
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
    Py_XDECREF(r->decode_time);
    PyMem_Free(r->events);
    PyObject_Free(r);
}

static Py_ssize_t raw_events_length(RawEvents *r) { return r->n; }

/* The event as msgspec decodes it alone: the Event of the batch's decoding */
PyObject *raw_event(const RawEvents *r, Py_ssize_t i) {
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


/* A field's value as msgspec gives it: Event's default where absent, args as bytes (raw JSON) */
PyObject *span_value(const RawEvents *r, const Span *sp, int f) {
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
    int time = (f == F_TS || f == F_DUR) && r->decode_time;  /* Event's Any fields: the float_hook's */
    PyObject *value = PyObject_CallOneArg(time ? r->decode_time : r->decode_value, raw);
    Py_DECREF(raw);
    return value;
}


/* The double a JSON number's text stands for, correctly rounded as msgspec reads it: exact
 * arithmetic where mantissa and power of ten are exact doubles, else Python's own parser */
int number_value(const char *text, Py_ssize_t n, double *value) {
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

/* The arguments of a counter's raw JSON args (an object, already checked as JSON): how many, or
 * -1 for Python's rules (a key escaped or twice, a number past the ordinary, more than
 * COUNTER_ARGS arguments). A number is the double float() makes of what msgspec decodes. */
int counter_args(const char *text, Py_ssize_t length, CounterArg *found) {
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

/* -- Kineto's [memory] instants ------------------------------------------------------------------
 * kineto._memory reads only the events named "[memory]" of a trace, a few per cent to a fifth of its
 * events: picked from a scanned batch here, no object made for the others, their time and the six
 * args it reads made as kineto's msgspec decoders make them (Kineto.events: a float as its text;
 * _MemoryArgs: a number as msgspec decodes it). Anything else is the event's text, for Python's
 * rules. Held to them by tests/test_memory_sources.py (picked events against decoded ones). */

/* _MemoryArgs' fields in its order: the args kineto._memory reads */
static const char *const MEMORY_KEYS[] = {"Device Type", "Device Id", "Addr", "Bytes", "Total Allocated",
                                          "Total Reserved"};
#define N_MEMORY_KEYS 6

/* An arg's value as _MemoryArgs decodes it, where plain: 1 (*value a new reference), 0 for
 * Python's rules (text, a huge int, an object), -1 on error */
static int memory_value(const unsigned char *text, Py_ssize_t n, int kind, PyObject **value) {
    long long whole;
    double d;
    if (kind == K_NULL) *value = Py_NewRef(Py_None);
    else if (kind == K_INT && small_int((const char *)text, n, &whole)) *value = PyLong_FromLongLong(whole);
    else if (kind == K_NUM && number_value((const char *)text, n, &d) && isfinite(d)) *value = PyFloat_FromDouble(d);
    else return 0;
    return *value ? 1 : -1;
}

/* The six args of a [memory] event's raw args (an object, already checked as JSON) into ``values``
 * (None where absent): 1; 0 for Python's rules (an escaped key, one of them twice, a value
 * memory_value leaves to Python), -1 on error; on 0 and -1 ``values`` are cleared */
static int memory_args(const unsigned char *text, Py_ssize_t length, PyObject **values) {
    Scan s = {text, text + length};
    int rc = 0;
    for (int k = 0; k < N_MEMORY_KEYS; k++) values[k] = NULL;
    sc_ws(&s);
    if (s.p >= s.end || *s.p++ != '{') goto done;
    sc_ws(&s);
    if (s.p < s.end && *s.p == '}') rc = 1;
    while (!rc) {
        const unsigned char *key = s.p;
        if (s.p >= s.end || *s.p != '"' || sc_string(&s) != K_STR) goto done;
        Py_ssize_t key_len = s.p - key - 2;
        int k = 0;
        while (k < N_MEMORY_KEYS && !((Py_ssize_t)strlen(MEMORY_KEYS[k]) == key_len &&
                                      !memcmp(MEMORY_KEYS[k], key + 1, key_len))) k++;
        sc_ws(&s);
        if (s.p >= s.end || *s.p++ != ':') goto done;
        sc_ws(&s);
        const unsigned char *value = s.p;
        int kind = sc_value(&s, 2);  /* an event is depth 0, its args 1, their values 2 */
        if (!kind) goto done;
        if (k < N_MEMORY_KEYS) {
            if (values[k]) goto done;  /* twice: msgspec's rules */
            if ((rc = memory_value(value, s.p - value, kind, &values[k])) != 1) goto done;
            rc = 0;
        }
        sc_ws(&s);
        if (s.p >= s.end) goto done;
        if (*s.p++ == '}') rc = 1;
        else if (s.p[-1] != ',') goto done;
        else sc_ws(&s);
    }
    for (int k = 0; k < N_MEMORY_KEYS; k++)
        if (!values[k]) values[k] = Py_NewRef(Py_None);
done:
    if (rc != 1)
        for (int k = 0; k < N_MEMORY_KEYS; k++) Py_CLEAR(values[k]);
    return rc;
}

/* A [memory] event's ts as Kineto.events decodes it (a float as its text), where plain: 1, 0 for
 * Python's rules, -1 on error */
static int memory_ts(const RawEvents *r, const Span *sp, PyObject **ts) {
    const char *text = span_text(r, sp);
    long long whole;
    switch (sp->kind) {
    case K_ABSENT: case K_NULL: *ts = Py_NewRef(Py_None); break;
    case K_INT: if (!small_int(text, sp->len, &whole)) return 0; *ts = PyLong_FromLongLong(whole); break;
    case K_NUM: *ts = PyUnicode_DecodeASCII(text, sp->len, NULL); break;  /* float_hook=str */
    case K_STR:
        if (!(*ts = PyUnicode_DecodeUTF8(text + 1, sp->len - 2, NULL))) { PyErr_Clear(); return 0; }
        break;
    default: return 0;
    }
    return *ts ? 1 : -1;
}

/* 1 if the scanned event is named ``name`` (its UTF-8 ``text``, ``n`` bytes), 0 if not, -1 on error */
static int named(const RawEvents *r, const RawEvent *e, PyObject *name, const char *text, Py_ssize_t n) {
    const Span *sp = &e->f[F_NAME];
    if (sp->kind == K_STR) return sp->len - 2 == n && !memcmp(span_text(r, sp) + 1, text, n);
    if (sp->kind != K_STR_ESC) return 0;
    PyObject *value = span_value(r, sp, F_NAME);
    if (!value) return -1;
    int found = PyUnicode_CheckExact(value) && PyUnicode_Compare(value, name) == 0;
    Py_DECREF(value);
    return found;
}

/* The [memory] event as kineto._memory reads it: (ts, *MEMORY_KEYS' values), or its text (bytes) */
static PyObject *memory_item(const RawEvents *r, const RawEvent *e) {
    PyObject *items[1 + N_MEMORY_KEYS] = {NULL};
    int rc = memory_ts(r, &e->f[F_TS], &items[0]);
    if (rc == 1 && e->f[F_ARGS].kind != K_ABSENT) {
        rc = memory_args((const unsigned char *)span_text(r, &e->f[F_ARGS]), e->f[F_ARGS].len, items + 1);
    } else if (rc == 1) {
        for (int k = 1; k <= N_MEMORY_KEYS; k++) items[k] = Py_NewRef(Py_None);
    }
    if (rc < 0) {
        Py_XDECREF(items[0]);
        return NULL;
    }
    if (rc == 0) {
        Py_XDECREF(items[0]);
        return PyBytes_FromStringAndSize(PyBytes_AS_STRING(r->data) + e->at, e->len);
    }
    PyObject *item = PyTuple_New(1 + N_MEMORY_KEYS);
    for (int k = 0; k <= N_MEMORY_KEYS; k++) {
        if (item) PyTuple_SET_ITEM(item, k, items[k]);
        else Py_DECREF(items[k]);
    }
    return item;
}

/* memory_events(events: RawEvents, name) -> [(ts, device type, device id, addr, bytes, total allocated,
 * total reserved) or the event's text], for each event named ``name``, in the batch's order */
static PyObject *memory_events(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    RawEvents *r = argc == 2 ? raw_batch(argv[0]) : NULL;
    if (!r || !PyUnicode_CheckExact(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "memory_events(events: RawEvents, name: str)");
        return NULL;
    }
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(argv[1], &n);
    PyObject *found = text ? PyList_New(0) : NULL;
    for (Py_ssize_t i = 0; found && i < r->n; i++) {
        int is_named = named(r, &r->events[i], argv[1], text, n);
        PyObject *item = is_named == 1 ? memory_item(r, &r->events[i]) : NULL;
        if (is_named < 0 || (is_named && (!item || PyList_Append(found, item) < 0))) Py_CLEAR(found);
        Py_XDECREF(item);
    }
    return found;
}

/* -- the [memory] events as kineto._MemoryPass.event makes them: Samples (and allocations to pair) --
 * Per event, Python made a tuple, read its time, named its device, summed and compared in dicts and
 * made its Samples: most of a Kineto detail conversion's Python. Here the events whose fields are
 * plain are made into the same Samples, with the pass's own state (its dicts); the first that is
 * not (a time or device not plain, no Bytes, a device not seen yet) stops the run and goes back to
 * the rule as memory_events gives it, which then goes on from the next. */

/* A number of _MemoryArgs as kineto._number reads it (memory_value makes only None, int and float) */
static int as_number(PyObject *value, double *d) {
    if (PyFloat_CheckExact(value)) *d = PyFloat_AS_DOUBLE(value);
    else if (PyLong_CheckExact(value)) *d = PyLong_AsDouble(value);  /* at most 18 digits: exact enough */
    else return 0;
    return 1;
}

/* A Sample(rank, lane, ts_ns, value) appended to ``out``: 0, or -1 with an error */
static int add_sample(PyObject *out, PyTypeObject *type, PyObject *rank, PyObject *lane, long long ts_ns,
                      double value) {
    PyObject *sample = type->tp_alloc(type, 4);
    if (!sample) return -1;
    PyObject *ts = PyLong_FromLongLong(ts_ns), *v = PyFloat_FromDouble(value);
    PyTuple_SET_ITEM(sample, 0, Py_NewRef(rank));
    PyTuple_SET_ITEM(sample, 1, Py_NewRef(lane));
    PyTuple_SET_ITEM(sample, 2, ts);
    PyTuple_SET_ITEM(sample, 3, v);
    int rc = ts && v ? PyList_Append(out, sample) : -1;
    Py_DECREF(sample);
    return rc;
}

/* One plain [memory] event into ``made`` (its Samples, then its allocation to pair): 1; 0 for the
 * rule (nothing done);
 * -1 on error. ``lanes`` maps (Device Type, Device Id) to what lanes_of gives: (device, its
 * component since the trace began, Allocated lane, Reserved lane, the since-began Allocated lane). */
typedef struct {
    PyObject *rank, *lanes, *running, *last_ns, *made;
    PyTypeObject *sample;
    long long offset;
    Py_ssize_t disordered;
} MemoryPass;

static int memory_sample(const RawEvents *r, const RawEvent *e, MemoryPass *m) {
    PyObject *v[N_MEMORY_KEYS] = {NULL};
    long long ns;
    if ((e->f[F_TS].kind == K_NUM && !r->decode_time) || !span_ns(r, &e->f[F_TS], F_TS, &ns) ||
        e->f[F_ARGS].kind == K_ABSENT)  /* a float ts the rule reads by its text, as span_ns then does */
        return 0;
    int rc = memory_args((const unsigned char *)span_text(r, &e->f[F_ARGS]), e->f[F_ARGS].len, v);
    if (rc != 1) return rc;
    PyObject *type = v[0], *id = v[1], *addr = v[2], *key = NULL, *lanes, *last;
    double size, allocated, reserved;
    int has_allocated = as_number(v[4], &allocated), has_reserved = as_number(v[5], &reserved);
    long long ts_ns = ns + m->offset;
    rc = 0;
    if (ns >= TIME_LIMIT_NS || ns <= -TIME_LIMIT_NS || ts_ns >= TIME_LIMIT_NS || ts_ns <= -TIME_LIMIT_NS ||
        !PyLong_CheckExact(type) || !PyLong_CheckExact(id) || !as_number(v[3], &size))
        goto done;
    if (!(key = PyTuple_Pack(2, type, id))) goto fail;
    if (!(lanes = PyDict_GetItemWithError(m->lanes, key))) {
        if (PyErr_Occurred()) goto fail;
        goto done;  /* a device not seen yet: the rule names it */
    }
    PyObject *device = PyTuple_GET_ITEM(lanes, 0);
    int absolute = has_allocated || has_reserved;
    if ((last = PyDict_GetItemWithError(m->last_ns, device))) {
        long long before = PyLong_AsLongLong(last);
        if (before == -1 && PyErr_Occurred()) goto fail;
        m->disordered += ts_ns < before;
    } else if (PyErr_Occurred()) {
        goto fail;
    }
    PyObject *at = PyLong_FromLongLong(ts_ns);
    if (!at || PyDict_SetItem(m->last_ns, device, at) < 0) {
        Py_XDECREF(at);
        goto fail;
    }
    Py_DECREF(at);
    if (absolute) {
        if (has_allocated && add_sample(m->made, m->sample, m->rank, PyTuple_GET_ITEM(lanes, 2), ts_ns,
                                        allocated) < 0) goto fail;
        if (has_reserved && add_sample(m->made, m->sample, m->rank, PyTuple_GET_ITEM(lanes, 3), ts_ns,
                                       reserved) < 0) goto fail;
    } else {
        PyObject *sum = PyDict_GetItemWithError(m->running, device);
        if (!sum && PyErr_Occurred()) goto fail;
        double total = (sum ? PyFloat_AsDouble(sum) : 0.0) + size;
        PyObject *made = PyFloat_FromDouble(total);
        if (!made || PyDict_SetItem(m->running, device, made) < 0) {
            Py_XDECREF(made);
            goto fail;
        }
        Py_DECREF(made);
        if (add_sample(m->made, m->sample, m->rank, PyTuple_GET_ITEM(lanes, 4), ts_ns, total) < 0) goto fail;
    }
    if (PyLong_CheckExact(addr) && size != 0.0) {
        PyObject *allocation = Py_BuildValue("(OOLd)", PyTuple_GET_ITEM(lanes, absolute ? 0 : 1), addr, ts_ns, size);
        if (!allocation || PyList_Append(m->made, allocation) < 0) {
            Py_XDECREF(allocation);
            goto fail;
        }
        Py_DECREF(allocation);
    }
    rc = 1;
    goto done;
fail:
    rc = -1;
done:
    Py_XDECREF(key);
    for (int k = 0; k < N_MEMORY_KEYS; k++) Py_XDECREF(v[k]);
    return rc;
}

/* memory_samples(events, at, name, rank, offset_ns, Sample, lanes, running, last_ns, made) -> (at,
 * item, disordered): from event ``at`` on, each [memory] event (named ``name``) made as
 * kineto._MemoryPass.event makes it, into ``made`` in the events' order: its Samples, then the
 * allocation to pair ((component, addr, ts_ns, bytes), a plain tuple), with its dicts ``running``
 * and ``last_ns``, until one is not plain: then where to go on from and that event as memory_events gives it (at
 * None: the batch is done), with how many events were earlier than the one before on their device.
 * The rule: _MemoryPass.event; tests/test_memory_sources.py holds this to it. */
static PyObject *memory_samples(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    RawEvents *r = argc == 10 ? raw_batch(argv[0]) : NULL;
    if (!r || !PyLong_Check(argv[1]) || !PyUnicode_CheckExact(argv[2]) || !PyType_Check(argv[5]) ||
        !PyDict_CheckExact(argv[6]) || !PyDict_CheckExact(argv[7]) || !PyDict_CheckExact(argv[8]) ||
        !PyList_CheckExact(argv[9])) {
        PyErr_SetString(PyExc_TypeError, "memory_samples(events, at, name, rank, offset_ns, Sample, lanes, "
                        "running, last_ns, made)");
        return NULL;
    }
    MemoryPass m = {argv[3], argv[6], argv[7], argv[8], argv[9], (PyTypeObject *)argv[5], 0, 0};
    Py_ssize_t at = PyLong_AsSsize_t(argv[1]), n;
    m.offset = PyLong_AsLongLong(argv[4]);
    const char *text = PyUnicode_AsUTF8AndSize(argv[2], &n);
    if (PyErr_Occurred() || !text) return NULL;
    for (Py_ssize_t i = at < 0 ? 0 : at; i < r->n; i++) {
        int is_named = named(r, &r->events[i], argv[2], text, n);
        if (is_named < 0) return NULL;
        if (!is_named) continue;
        int rc = memory_sample(r, &r->events[i], &m);
        if (rc < 0) return NULL;
        if (rc == 0) {
            PyObject *item = memory_item(r, &r->events[i]);
            return item ? Py_BuildValue("(nNn)", i + 1, item, m.disordered) : NULL;
        }
    }
    return Py_BuildValue("(OOn)", Py_None, Py_None, m.disordered);
}

RawEvents *raw_batch(PyObject *events) {
    return Py_IS_TYPE(events, &RawEventsType) ? (RawEvents *)events : NULL;
}

PyMethodDef EVENTS_METHODS[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "scan(data, decode_event, decode_value, decode_time=None) -> RawEvents, or None if the batch is not plain "
     "JSON events"},
    {"memory_samples", (PyCFunction)(void (*)(void))memory_samples, METH_FASTCALL,
     "memory_samples(events, at, name, rank, offset_ns, Sample, lanes, running, last_ns, made) "
     "-> (at, item, disordered): the plain [memory] events from at on as Samples, up to one for the rule"},
    {"memory_events", (PyCFunction)(void (*)(void))memory_events, METH_FASTCALL,
     "memory_events(events: RawEvents, name) -> [(ts, device type, device id, addr, bytes, total allocated, "
     "total reserved) or the event's text] of the events named name"},
    {NULL, NULL, 0, NULL},
};

int events_ready(PyObject *module) {
    for (int c = 0x20; c < 256; c++) ORDINARY[c] = c != '"' && c != '\\';
    SPACE[' '] = SPACE['\n'] = SPACE['\r'] = SPACE['\t'] = 1;
    if (PyType_Ready(&RawEventsType) < 0) return -1;
    return PyModule_AddObjectRef(module, "RawEvents", (PyObject *)&RawEventsType);
}
