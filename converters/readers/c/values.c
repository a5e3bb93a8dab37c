/* The values the reader takes from an event's text without decoding it: times in ns by the rule
 * of times.us_to_ns (also the module's us_to_ns), and the few args read_events reads from their raw
 * JSON text (torch_npu's "Task Type", Kineto's "correlation"). Each gives up (0, NULL) where the text
 * alone cannot give what decoding gives, and the Python rules read the event instead. */
#include "core.h"

#include <math.h>
#include <string.h>

/* ns from µs as profilers write them: a number (``round(us * 1000)``, exact below 9e12 µs), or
 * a string of ASCII digits with at most 3 decimals, parsed exactly. Any other form (more
 * decimals, an exponent, huge values, bad input): 0 with *ok = 0, for the Python rules. */
CORE_PRIVATE long long text_ns(const char *text, Py_ssize_t n, int *ok) {
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

CORE_PRIVATE long long double_ns(double value, int *ok) {
    *ok = value > -9e12 && value < 9e12;
    return *ok ? (long long)nearbyint(value * 1000.0) : 0;
}

/* An int of µs is exact in ns at any size (Kineto writes epoch µs as ints): within ±2**62 ns
 * (model.TIME_LIMIT_NS), else Python's rules say why it is no time */
CORE_PRIVATE long long int_ns(long long value, int *ok) {
    *ok = value >= -4611686018427387LL && value <= 4611686018427387LL;
    return *ok ? value * 1000 : 0;
}

CORE_PRIVATE long long fast_ns(PyObject *us, int *ok) {
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

/* us_to_ns(us, exact) -> int: ``fast_ns``, or ``exact(us)`` (times._exact_us_to_ns) */
CORE_PRIVATE PyObject *us_to_ns(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 2) {
        PyErr_SetString(PyExc_TypeError, "us_to_ns(us, exact)");
        return NULL;
    }
    int ok;
    long long ns = fast_ns(argv[0], &ok);
    return ok ? PyLong_FromLongLong(ns) : PyObject_CallOneArg(argv[1], argv[0]);
}

/* Past JSON's white space (torch_npu writes ``"Task Type": "AI_CORE"``, a space after the colon) */
CORE_PRIVATE const char *past_space(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* Where the top-level "Task Type" of raw JSON args lies where the text alone gives what decoding
 * them gives (chrome_trace._task_type): once, after the only "{", a plain string without escapes,
 * not empty, JSON's white space allowed around its colon. NULL to leave the event to Python. */
CORE_PRIVATE const char *task_type_in(const char *data, Py_ssize_t length, Py_ssize_t *n) {
    static const char name[] = "\"Task Type\"";
    const char *end = data + length, *at = NULL;
    int braces = 0;
    for (const char *p = data; p < end; p++) {
        if (*p == '{') {
            braces++;
        } else if (*p == '"' && end - p >= (Py_ssize_t)sizeof(name) - 1 && !memcmp(p, name, sizeof(name) - 1)) {
            const char *colon = past_space(p + sizeof(name) - 1, end);
            const char *quote = colon < end && *colon == ':' ? past_space(colon + 1, end) : end;
            if (at || braces != 1 || quote == end || *quote != '"')
                return NULL;  /* twice, nested, or not a plain string: decoding decides */
            at = quote + 1;
        }
    }
    const char *close = at ? memchr(at, '"', end - at) : NULL;
    if (!close || memchr(at, '\\', close - at) || close == at) return NULL;
    *n = close - at;
    return at;
}

/* The top-level "correlation" of raw JSON args (an object whose syntax events.c or msgspec checked)
 * where the text alone gives what decoding them as kineto._Args gives: 1 and *value for an int of at
 * most 18 digits, 2 for none; 0 for Python's rules: the key twice, another value, a string with an
 * escape, a control or a byte past ASCII (which decoding may read otherwise, or refuse) */
CORE_PRIVATE int correlation_in(const char *p, Py_ssize_t length, long long *value) {
    static const char key[] = "\"correlation\"";
    const char *end = p + length;
    int depth = 0, found = 0;
    for (; p < end; p++) {
        if (*p == '{' || *p == '[') {
            depth++;
        } else if (*p == '}' || *p == ']') {
            depth--;
        } else if (*p == '"') {
            const char *start = p;
            for (p++; p < end && *p != '"'; p++)
                if (*p == '\\' || (unsigned char)*p >= 0x80 || (unsigned char)*p < 0x20) return 0;
            if (p >= end) return 0;
            if (depth != 1 || p + 1 - start != (Py_ssize_t)sizeof(key) - 1 || memcmp(start, key, sizeof(key) - 1))
                continue;
            const char *v = past_space(p + 1, end);
            if (v >= end || *v != ':') continue;  /* a value, not the key */
            v = past_space(v + 1, end);
            const char *e = v + (v < end && *v == '-');
            while (e < end && *e >= '0' && *e <= '9') e++;
            const char *after = past_space(e, end);
            if (found || after >= end || (*after != ',' && *after != '}') || !small_int(v, e - v, value) ||
                (e - v == 2 && v[0] == '-'))  /* "-0" is 0, whose text differs */
                return 0;
            found = 1;
        }
    }
    return found ? 1 : 2;
}


/* A scanned time field in ns, as times.us_to_ns reads what the batch's decoding gives: a string's
 * text, an int, a float's double; where the batch decodes ts and dur with Kineto's float_hook=str
 * (``decode_time``), a float is its text, read as that str is: exactly, never through a double.
 * An absent dur is Event's default 0, an absent ts None (Python's). 1 (and *ns), 0 for Python's
 * rules. */
CORE_PRIVATE int span_ns(const RawEvents *r, const Span *sp, int f, long long *ns) {
    const char *text = span_text(r, sp);
    long long whole;
    double d;
    int ok = 0;
    switch (sp->kind) {
    case K_ABSENT: *ns = 0; return f == F_DUR;
    case K_STR: *ns = text_ns(text + 1, sp->len - 2, &ok); return ok;
    case K_INT: if (small_int(text, sp->len, &whole)) *ns = int_ns(whole, &ok); return ok;
    case K_NUM:
        if (r->decode_time) *ns = text_ns(text, sp->len, &ok);
        else if (number_value(text, sp->len, &d)) *ns = double_ns(d, &ok);
        return ok;
    }
    return 0;
}
