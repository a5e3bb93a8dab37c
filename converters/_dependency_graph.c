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
#include <string.h>

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

/* undominated(sources, sinks, lags, arrivals, dones) -> bytes: contract's pairs (source, sink, lag:
 * array('q') each, a source -1 for the anchors) and its synchronisation points (each arrival's
 * completion), a byte per pair, 1 where it is kept: dependency_graph._undominated_rule, each
 * source's arrivals walked with the sinks their completions reach, in arrays (in Python those
 * walks were 3x the rest of `critical` on HTA's df_index_resolver trace). Node ids are >= 0. */
static PyObject *undominated(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "undominated(sources, sinks, lags, arrivals, dones)");
        return NULL;
    }
    Py_buffer b[5];
    int held = 0;
    PyObject *kept_out = NULL;
    int64_t *first = NULL, *next = NULL, *done_of = NULL, *longest = NULL, *touched = NULL;
    if (PyObject_GetBuffer(args[0], &b[0], PyBUF_SIMPLE) < 0) return NULL;
    held = 1;
    Py_ssize_t n = b[0].len / (Py_ssize_t)sizeof(int64_t);
    if (view(args[1], &b[1], n, "sinks") < 0) goto done;
    held = 2;
    if (view(args[2], &b[2], n, "lags") < 0) goto done;
    held = 3;
    if (PyObject_GetBuffer(args[3], &b[3], PyBUF_SIMPLE) < 0) goto done;
    held = 4;
    Py_ssize_t m = b[3].len / (Py_ssize_t)sizeof(int64_t);
    if (view(args[4], &b[4], m, "dones") < 0) goto done;
    held = 5;
    const int64_t *src = b[0].buf, *sink = b[1].buf, *lag = b[2].buf, *arrival = b[3].buf, *done_at = b[4].buf;
    int64_t ids = 0;  /* node ids 0..ids-1; a source's slot is its id + 1 (0: the anchors) */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (src[i] < -1 || sink[i] < 0) { PyErr_SetString(PyExc_ValueError, "undominated: a node id below 0"); goto done; }
        if (src[i] + 1 > ids) ids = src[i] + 1;
        if (sink[i] + 1 > ids) ids = sink[i] + 1;
    }
    for (Py_ssize_t k = 0; k < m; k++) {
        if (arrival[k] < 0 || done_at[k] < 0) { PyErr_SetString(PyExc_ValueError, "undominated: a node id below 0"); goto done; }
        if (arrival[k] + 1 > ids) ids = arrival[k] + 1;
        if (done_at[k] + 1 > ids) ids = done_at[k] + 1;
    }
    first = PyMem_Malloc(sizeof(int64_t) * (size_t)(ids + 1));  /* per source slot: its first pair, chained */
    next = PyMem_Malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    done_of = PyMem_Malloc(sizeof(int64_t) * (size_t)(ids ? ids : 1));
    longest = PyMem_Malloc(sizeof(int64_t) * (size_t)(ids ? ids : 1));
    touched = PyMem_Malloc(sizeof(int64_t) * (size_t)(ids ? ids : 1));
    if (!first || !next || !done_of || !longest || !touched) { PyErr_NoMemory(); goto done; }
    for (int64_t i = 0; i <= ids; i++) first[i] = -1;
    for (int64_t i = 0; i < ids; i++) done_of[i] = -1, longest[i] = INT64_MIN;
    for (Py_ssize_t k = 0; k < m; k++) done_of[arrival[k]] = done_at[k];  /* a dict: the last one said */
    for (Py_ssize_t i = n - 1; i >= 0; i--) {  /* each source's pairs in their order */
        next[i] = first[src[i] + 1];
        first[src[i] + 1] = i;
    }
    if (!(kept_out = PyBytes_FromStringAndSize(NULL, n))) goto done;
    char *kept = PyBytes_AS_STRING(kept_out);
    memset(kept, 1, (size_t)n);
    for (int64_t slot = 0; slot <= ids; slot++) {
        Py_ssize_t touches = 0;
        for (int64_t i = first[slot]; i >= 0; i = next[i]) {
            int64_t done = done_of[sink[i]];
            if (done < 0) continue;
            for (int64_t j = first[done + 1]; j >= 0; j = next[j]) {
                if (sink[j] == sink[i]) continue;  /* the arrival itself */
                int64_t through = lag[i] + lag[j];
                if (longest[sink[j]] == INT64_MIN) touched[touches++] = sink[j];
                if (through > longest[sink[j]]) longest[sink[j]] = through;
            }
        }
        for (int64_t i = first[slot]; i >= 0; i = next[i])
            if (longest[sink[i]] != INT64_MIN && longest[sink[i]] >= lag[i]) kept[i] = 0;
        for (Py_ssize_t t = 0; t < touches; t++) longest[touched[t]] = INT64_MIN;
    }
done:
    if (PyErr_Occurred()) Py_CLEAR(kept_out);
    PyMem_Free(first);
    PyMem_Free(next);
    PyMem_Free(done_of);
    PyMem_Free(longest);
    PyMem_Free(touched);
    for (int k = 0; k < held; k++) PyBuffer_Release(&b[k]);
    return kept_out;
}

static PyMethodDef methods[] = {
    {"schedule", (PyCFunction)(void (*)(void))schedule, METH_FASTCALL,
     "schedule(offsets, preds, lags, durs, short, types, anchors, first, column) -> (starts, binding)"},
    {"undominated", (PyCFunction)(void (*)(void))undominated, METH_FASTCALL,
     "undominated(sources, sinks, lags, arrivals, dones) -> bytes: 1 for each pair contract keeps"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_dependency_graph", .m_doc = "The critical path's schedule of a rank's step, and its contraction's pairs.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__dependency_graph(void) { return PyModule_Create(&module); }
