/* The critical path's schedule of one rank's step, in C: ``contract`` schedules the rank's graph
 * once per source and, per source, once per op type on a chain (the op-type what-if), each a walk
 * over every edge; in Python those walks were nearly all of `critical`'s and `report`'s time.
 *
 * schedule(offsets, preds, lags, durs, short, types, anchors, first, column) -> (starts, binding):
 * converters.critical.Graph.schedule(durs, anchors=..., first=first) and, per node, the predecessor
 * Graph.binding names, over a graph packed as arrays of signed 64-bit ints (array('q'), native
 * order): node i's edges in are preds[offsets[i]:offsets[i + 1]] with lags[...] (predecessors come
 * first); durs the durations, except that a node whose types[i] == column (column >= 0) lasts
 * short[i] (the op type 10% shorter); anchors[i] the start of a node without edges in (NEVER: never
 * reached). Nodes before ``first`` are never reached. starts: bytes of N int64 (NEVER where
 * unreached); binding: bytes of N int64 (-1: none, an anchor or unreached).
 * The Python methods are the reference (tests/test_critical_schedule.py holds this to them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define NEVER (-((int64_t)1 << 62))

static int view(PyObject *obj, Py_buffer *buf, Py_ssize_t items, const char *what) {
    if (PyObject_GetBuffer(obj, buf, PyBUF_SIMPLE) < 0) return -1;
    if (buf->len != items * (Py_ssize_t)sizeof(int64_t)) {
        PyBuffer_Release(buf);
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, not %zd int64", what, buf->len, items);
        return -1;
    }
    return 0;
}

static PyObject *schedule(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "schedule(offsets, preds, lags, durs, short, types, anchors, first, column)");
        return NULL;
    }
    Py_buffer b[7];
    int held = 0;
    PyObject *result = NULL, *starts_out = NULL, *binding_out = NULL;
    Py_ssize_t first = PyLong_AsSsize_t(args[7]);
    long long column = PyLong_AsLongLong(args[8]);
    if (PyErr_Occurred()) return NULL;
    if (PyObject_GetBuffer(args[0], &b[0], PyBUF_SIMPLE) < 0) return NULL;
    held = 1;
    Py_ssize_t n = b[0].len / (Py_ssize_t)sizeof(int64_t) - 1;
    const int64_t *offsets = b[0].buf;
    if (n < 0) { PyErr_SetString(PyExc_ValueError, "offsets: empty"); goto done; }
    Py_ssize_t edges = offsets[n];
    Py_ssize_t sizes[7] = {n + 1, edges, edges, n, n, n, n};
    const char *names[7] = {"offsets", "preds", "lags", "durs", "short", "types", "anchors"};
    for (; held < 7; held++)
        if (view(args[held], &b[held], sizes[held], names[held]) < 0) goto done;
    const int64_t *preds = b[1].buf, *lags = b[2].buf, *durs = b[3].buf, *shorts = b[4].buf,
                  *types = b[5].buf, *anchors = b[6].buf;
    if (!(starts_out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t)))) goto done;
    if (!(binding_out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t)))) goto done;
    int64_t *starts = (int64_t *)PyBytes_AS_STRING(starts_out);
    int64_t *binding = (int64_t *)PyBytes_AS_STRING(binding_out);
    for (Py_ssize_t i = 0; i < n; i++) {
        starts[i] = NEVER;
        binding[i] = -1;
        if (i < first) continue;
        int64_t lo = offsets[i], hi = offsets[i + 1];
        if (lo == hi) {
            starts[i] = anchors[i];
            continue;
        }
        int64_t start = NEVER, best = -1, best_at = NEVER;
        for (int64_t k = lo; k < hi; k++) {
            int64_t p = preds[k];
            if (p < 0 || p >= i) {
                PyErr_SetString(PyExc_ValueError, "predecessors come first");
                goto done;
            }
            if (starts[p] == NEVER) continue;
            int64_t dur = column >= 0 && types[p] == column ? shorts[p] : durs[p];
            int64_t at = starts[p] + dur + lags[k];
            if (at > start) start = at;
            /* Graph.binding: the latest end plus lag; ties: the latest added */
            if (at > best_at || (at == best_at && best >= 0 && p > best)) {
                best = p;
                best_at = at;
            }
        }
        starts[i] = start;
        binding[i] = best;
    }
    result = PyTuple_Pack(2, starts_out, binding_out);
done:
    Py_XDECREF(starts_out);
    Py_XDECREF(binding_out);
    for (int k = 0; k < held; k++) PyBuffer_Release(&b[k]);
    return result;
}

static PyMethodDef methods[] = {
    {"schedule", (PyCFunction)(void (*)(void))schedule, METH_FASTCALL,
     "schedule(offsets, preds, lags, durs, short, types, anchors, first, column) -> (starts, binding)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_dependency_graph", .m_doc = "The critical path's schedule of a rank's step.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__dependency_graph(void) { return PyModule_Create(&module); }
