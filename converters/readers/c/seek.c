/* seek.names_and_steps in C: where a chunk of a file holds any of a few words (found_at), each
 * where bytes.find finds it (tests/readers/test_chrome_trace.py holds it so). */
#include "core.h"

#include <string.h>

typedef struct { const char *text; Py_ssize_t len, at; } Needle;  /* at: where its two bytes looked for lie */

static int found_one(PyObject *out, long long where, Py_ssize_t most) {
    if (PyList_GET_SIZE(out) >= most) return 1;
    PyObject *value = PyLong_FromLongLong(where);
    int rc = value ? PyList_Append(out, value) : -1;
    Py_XDECREF(value);
    return rc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* found_at's first part, 32 places at a time while a needle fits in a full load: where each needle's
 * two bytes lie (one load of the data and of the data a byte on, shared by every needle; a block
 * where none lie, nearly all of them, is passed over with one test), each needle there compared
 * whole. Finds every needle starting before *i - its at (the rest is found_at's loop's). */
__attribute__((target("avx2")))
static int found_wide(const char *data, Py_ssize_t n, const Needle *needles, Py_ssize_t n_needles,
                      Py_ssize_t longest, Py_ssize_t *i, PyObject *out, long long base, Py_ssize_t most) {
    __m256i first[8], second[8], pair[8];
    int rc = 0;
    for (Py_ssize_t k = 0; k < n_needles; k++) {
        first[k] = _mm256_set1_epi8(needles[k].text[needles[k].at]);
        second[k] = _mm256_set1_epi8(needles[k].text[needles[k].at + 1]);
    }
    for (; rc == 0 && *i + longest + 32 <= n; *i += 32) {
        __m256i here = _mm256_loadu_si256((const __m256i *)(data + *i));
        __m256i next = _mm256_loadu_si256((const __m256i *)(data + *i + 1));
        __m256i any = _mm256_setzero_si256();
        for (Py_ssize_t k = 0; k < n_needles; k++) {
            pair[k] = _mm256_and_si256(_mm256_cmpeq_epi8(here, first[k]), _mm256_cmpeq_epi8(next, second[k]));
            any = _mm256_or_si256(any, pair[k]);
        }
        if (_mm256_testz_si256(any, any)) continue;
        for (Py_ssize_t k = 0; rc == 0 && k < n_needles; k++)
            for (unsigned mask = (unsigned)_mm256_movemask_epi8(pair[k]); mask && rc == 0; mask &= mask - 1) {
                Py_ssize_t s = *i + __builtin_ctz(mask) - needles[k].at;  /* where the needle would start */
                if (s >= 0 && !memcmp(data + s, needles[k].text, needles[k].len)) rc = found_one(out, base + s, most);
            }
    }
    return rc;
}
#endif

/* 1 if found_at looks 32 places at a time (else it is slower than scanning: seek.py does not use it) */
static int wide_search(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

/* found_at(data, needles, base, most) -> [base + where each needle lies in data], or None if more
 * than ``most``. ``needles``: (bytes, at) pairs; a needle is looked for where its bytes at and
 * at + 1 lie, 32 places at a time (AVX2, where the processor has it), and then compared whole:
 * one pass over the data for all of them, where bytes.find or memmem stop at each of JSON's
 * many quotes and backslashes (~9 GB/s on torch_npu's trace_view.json, against 0.5 for
 * bytes.find). The rule: each place bytes.find finds a needle of seek._NEEDLES. */
static PyObject *found_at(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    Py_buffer view;
    Needle needles[8];
    Py_ssize_t n_needles = argc == 4 && PyTuple_Check(argv[1]) ? PyTuple_GET_SIZE(argv[1]) : -1, longest = 0;
    for (Py_ssize_t k = 0; k < n_needles && n_needles <= 8; k++) {
        PyObject *item = PyTuple_GET_ITEM(argv[1], k);
        PyObject *text = PyTuple_Check(item) && PyTuple_GET_SIZE(item) == NEEDLE_FIELDS ? PyTuple_GET_ITEM(item, NEEDLE_TEXT)
                                                                                         : NULL;
        Py_ssize_t at = text ? PyLong_AsSsize_t(PyTuple_GET_ITEM(item, NEEDLE_AT)) : -1;
        if (!text || !PyBytes_Check(text) || at < 0 || at + 2 > PyBytes_GET_SIZE(text)) { n_needles = -1; break; }
        needles[k] = (Needle){PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text), at};
        if (needles[k].len > longest) longest = needles[k].len;
    }
    PyErr_Clear();
    if (n_needles < 0 || n_needles > 8 || PyObject_GetBuffer(argv[0], &view, PyBUF_SIMPLE) < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "found_at(data, needles: tuple[(bytes, at)], base, most)");
        return NULL;
    }
    long long base = PyLong_AsLongLong(argv[2]);
    Py_ssize_t most = PyLong_AsSsize_t(argv[3]), n = view.len, i = 0, wide = 0, furthest = 0;
    const char *data = view.buf;
    PyObject *out = PyErr_Occurred() ? NULL : PyList_New(0);
    int rc = out ? 0 : -1;
#if defined(__x86_64__) && defined(__GNUC__)
    if (rc == 0 && wide_search()) rc = found_wide(data, n, needles, n_needles, longest, &wide, out, base, most);
#endif
    for (Py_ssize_t k = 0; k < n_needles; k++)
        if (needles[k].at > furthest) furthest = needles[k].at;
    /* the rest, a place at a time: from the first start found_wide did not look at */
    for (i = wide > furthest ? wide - furthest : 0; rc == 0 && i < n; i++)
        for (Py_ssize_t k = 0; rc == 0 && k < n_needles; k++)
            if (i >= wide - needles[k].at && i + needles[k].len <= n && !memcmp(data + i, needles[k].text, needles[k].len))
                rc = found_one(out, base + i, most);
    PyBuffer_Release(&view);
    if (rc == 1) Py_SETREF(out, Py_NewRef(Py_None));
    if (rc < 0) Py_CLEAR(out);
    return out;
}


PyMethodDef SEEK_METHODS[] = {
    {"found_at", (PyCFunction)(void (*)(void))found_at, METH_FASTCALL,
     "found_at(data, needles, base, most) -> [where each needle lies, from base], or None if more than most"},
    {NULL, NULL, 0, NULL},
};

int seek_ready(PyObject *module) { return PyModule_AddIntConstant(module, "WIDE_SEARCH", wide_search()); }
