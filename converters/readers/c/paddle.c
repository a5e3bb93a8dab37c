/* paddle.Paddle._normalise over a decoded batch, in place: each name without the duration Paddle ends
 * it with (paddle._SUFFIX), each start as µs from the profiler's zero (``args.start_time`` where it
 * agrees with ``ts``, else ``ts`` less the zero). An event whose text C cannot judge as the rule does
 * (a name not ASCII, args with an escape or more than one "start_time", times C does not read) is
 * handed whole to the rule, before anything of it is changed. */
#include "core.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* paddle._SLACK_NS and the µs ts is cut to: start_time agrees where zero + start - ts is in [-10, 1010) */
#define SLACK_NS 10

/* Where the duration an ASCII name ends with begins (``[12.3 us]``: \[\d+(?:\.\d+)? (?:ns|us|ms|s)\]$), or -1 */
static Py_ssize_t suffix_at(const char *s, Py_ssize_t n) {
    Py_ssize_t i = n - 1, digits;
    if (i < 0 || s[i--] != ']' || i < 0 || s[i--] != 's') return -1;
    if (i >= 0 && (s[i] == 'n' || s[i] == 'u' || s[i] == 'm')) i--;
    if (i < 0 || s[i--] != ' ') return -1;
    for (digits = 0; i >= 0 && s[i] >= '0' && s[i] <= '9'; i--) digits++;
    if (digits && i >= 0 && s[i] == '.') {
        for (i--, digits = 0; i >= 0 && s[i] >= '0' && s[i] <= '9'; i--) digits++;
    }
    return digits && i >= 0 && s[i] == '[' ? i : -1;
}

/* The name the rule gives: a new reference to it (``name`` itself where nothing is cut), or NULL with
 * *slow = 1 where the rule must judge (its \d is any Unicode digit) */
static PyObject *name_of(PyObject *name, int *slow) {
    if (!PyUnicode_CheckExact(name) || PyUnicode_GET_LENGTH(name) == 0 ||
        PyUnicode_READ_CHAR(name, PyUnicode_GET_LENGTH(name) - 1) != ']') {
        Py_INCREF(name);
        return name;
    }
    if (!PyUnicode_IS_ASCII(name)) {
        *slow = 1;
        return NULL;
    }
    Py_ssize_t at = suffix_at((const char *)PyUnicode_DATA(name), PyUnicode_GET_LENGTH(name));
    if (at < 0) {
        Py_INCREF(name);
        return name;
    }
    return PyUnicode_Substring(name, 0, at);
}

/* ``args.start_time``'s text without its " us", as _SPAN decodes it: 1 and where it lies; 0 where
 * the args hold none (empty, or no "start_time" in them); -1 where the rule must judge (an escape
 * anywhere, the key not first or not once, its value no plain string ending in " us") */
static int start_time_in(const char *data, Py_ssize_t n, const char **at, Py_ssize_t *len) {
    static const char key[] = "\"start_time\"";
    const char *end = data + n, *p;
    if (n == 0) return 0;
    if (memchr(data, '\\', n)) return -1;
    if (!memmem(data, n, key + 1, sizeof key - 3)) return 0;
    p = past_space(data, end);
    if (p == end || *p != '{') return -1;
    p = past_space(p + 1, end);
    if (end - p < (Py_ssize_t)sizeof key - 1 || memcmp(p, key, sizeof key - 1)) return -1;
    p = past_space(p + sizeof key - 1, end);
    if (p == end || *p != ':') return -1;
    p = past_space(p + 1, end);
    if (p == end || *p != '"') return -1;
    const char *value = p + 1, *close = memchr(value, '"', end - value);
    if (!close || close - value < 3 || memcmp(close - 3, " us", 3) ||
        memmem(close, end - close, key + 1, sizeof key - 3))
        return -1;
    *at = value;
    *len = close - value - 3;
    return 1;
}

/* ns as the µs text the readers parse exactly (paddle._ns_text) */
static PyObject *ns_text(long long ns) {
    unsigned long long magnitude = ns < 0 ? 0ULL - (unsigned long long)ns : (unsigned long long)ns;
    char text[32];
    int n = snprintf(text, sizeof text, "%s%llu.%03llu", ns < 0 ? "-" : "", magnitude / 1000, magnitude % 1000);
    return PyUnicode_DecodeASCII(text, n, NULL);
}

/* The event's ts by the rule (a new str), or NULL with *slow = 1 where the rule must judge it, or
 * NULL on error */
static PyObject *ts_of(PyObject *event, PyObject *ts, long long zero, int *slow) {
    int ok;
    long long ts_ns = fast_ns(ts, &ok), relative = 0;
    if (!ok) {
        *slow = 1;
        return NULL;
    }
    PyObject *args = PyObject_GetAttr(event, S_args);
    if (!args) return NULL;
    Py_buffer raw;
    if (PyObject_GetBuffer(args, &raw, PyBUF_SIMPLE) < 0) {
        Py_DECREF(args);
        return NULL;
    }
    const char *start = NULL;
    Py_ssize_t len = 0;
    int found = start_time_in(raw.buf, raw.len, &start, &len);
    PyObject *made = NULL;
    if (found > 0) relative = text_ns(start, len, &ok);
    if (found < 0 || (found > 0 && !ok)) {
        *slow = 1;
    } else {
        __int128 apart = (__int128)zero + relative - ts_ns, moved = (__int128)ts_ns - zero;
        if (found > 0 && apart >= -SLACK_NS && apart < 1000 + SLACK_NS)
            made = PyUnicode_DecodeASCII(start, len, NULL);
        else if (moved > -(__int128)LLONG_MAX && moved < (__int128)LLONG_MAX)
            made = ns_text((long long)moved);
        else
            *slow = 1;
    }
    PyBuffer_Release(&raw);
    Py_DECREF(args);
    return made;
}

/* One event by the rule in C: 1 done, 0 to hand to the rule, -1 on error */
static int normalise_one(PyObject *event, long long zero) {
    int slow = 0, done = -1;
    PyObject *name = PyObject_GetAttr(event, S_name), *ph = NULL, *ts = NULL, *named = NULL, *moved = NULL;
    if (!name || !(ph = PyObject_GetAttr(event, S_ph)) || !(ts = PyObject_GetAttr(event, S_ts))) goto out;
    if (!(named = name_of(name, &slow))) {
        done = slow ? 0 : -1;
        goto out;
    }
    int kept = (PyUnicode_CheckExact(ph) && PyUnicode_CompareWithASCIIString(ph, "M") == 0) || ts == Py_None;
    if (!kept && !(moved = ts_of(event, ts, zero, &slow))) {
        done = slow ? 0 : -1;
        goto out;
    }
    if (named != name && PyObject_SetAttr(event, S_name, named) < 0) goto out;
    if (moved && PyObject_SetAttr(event, S_ts, moved) < 0) goto out;
    done = 1;
out:
    Py_XDECREF(name);
    Py_XDECREF(ph);
    Py_XDECREF(ts);
    Py_XDECREF(named);
    Py_XDECREF(moved);
    return done;
}

/* normalise(events, zero_ns, rule) -> None: ``rule(event)`` (Paddle._normalise) for each event of the
 * list, in C where the text lets it */
static PyObject *normalise(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 3 || !PyList_Check(argv[0]) || !PyLong_Check(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "normalise(events: list, zero_ns: int, rule)");
        return NULL;
    }
    int overflow;
    long long zero = PyLong_AsLongLongAndOverflow(argv[1], &overflow);
    if (zero == -1 && PyErr_Occurred()) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(argv[0]); i++) {
        PyObject *event = PyList_GET_ITEM(argv[0], i), *ruled = NULL;
        Py_INCREF(event);
        int done = overflow ? 0 : normalise_one(event, zero);
        if (!done) done = (ruled = PyObject_CallOneArg(argv[2], event)) ? 1 : -1;
        Py_XDECREF(ruled);
        Py_DECREF(event);
        if (done < 0) return NULL;
    }
    Py_RETURN_NONE;
}

CORE_PRIVATE PyMethodDef PADDLE_METHODS[] = {
    {"normalise", (PyCFunction)(void (*)(void))normalise, METH_FASTCALL,
     "normalise(events, zero_ns, rule) -> None: Paddle's names and times as rule(event) makes them, in place"},
    {NULL, NULL, 0, NULL},
};
