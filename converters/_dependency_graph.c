/* The critical path's schedule of one rank's step, in C: ``contract`` schedules the rank's graph
 * once per source and, per source, once per op type on a chain (the op-type what-if), each a walk
 * over every edge; in Python those walks were nearly all of `critical`'s and `report`'s time.
 *
 * schedule(offsets, preds, lags, durs, short, types, anchors, first, stop, column) -> (starts, binding):
 * converters.critical.Graph.schedule(durs, anchors=..., first=first) and, per node, the predecessor
 * Graph.binding names, over a graph packed as arrays of signed 64-bit ints (array('q'), native
 * order): node i's edges in are preds[offsets[i]:offsets[i + 1]] with lags[...] (predecessors come
 * first); durs the durations, except that a node whose types[i] == column (column >= 0) lasts
 * short[i] (the op type 10% shorter); anchors[i] the start of a node without edges in (NEVER: never
 * reached). Nodes before ``first`` are never reached, and from ``stop`` on not walked: starts and
 * binding are of nodes first..stop-1 only, bytes of int64 each (starts: NEVER where unreached;
 * binding: -1 for none, an anchor or unreached).
 * pairs(...): contract's first pass, every source's schedule and the lags of the sinks it reaches,
 * in one call (per source in Python, its pairs were a third of `critical` on HTA's df_index_resolver
 * trace). chains(...): the tree of a source's chains to the sinks kept, and the op types on each.
 * typed(...): a source's schedule, its chains and, per op type on them, its sinks' lags with that
 * type short, in one call.
 * undominated(...): the pairs contract keeps.
 * The Python methods are the reference (tests/test_critical_schedule.py holds this to them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_buffer.h"

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

/* A packed graph's first ``count`` columns viewed into ``b``: offsets, the preds and lags of its edges,
 * then columns of its nodes (``names``: each column's, for the error), each checked for its length;
 * its nodes counted into *n. How many are held: ``count``, or fewer with the error set. */
static int view_graph(PyObject *const *args, Py_buffer *b, int count, const char *const *names, Py_ssize_t *n) {
    if (PyObject_GetBuffer(args[0], &b[0], PyBUF_SIMPLE) < 0) return 0;
    *n = b[0].len / (Py_ssize_t)sizeof(int64_t) - 1;
    if (*n < 0) {
        PyErr_SetString(PyExc_ValueError, "offsets: empty");
        return 1;
    }
    Py_ssize_t edges = ((const int64_t *)b[0].buf)[*n];
    for (int k = 1; k < count; k++)
        if (view(args[k], &b[k], k < 3 ? edges : *n, names[k]) < 0) return k;
    return count;
}

static const char *const GRAPH_COLUMNS[7] = {"offsets", "preds", "lags", "durs", "short", "types", "anchors"};

/* Graph.schedule's walk over nodes from..stop-1 of a packed graph's window first..stop-1 (the
 * window's starts before ``from`` already in ``starts``) (those before first never
 * reached, those from stop on not walked: no node before stop depends on them) into
 * starts[i - first] and, where binding is not NULL, each node's binding predecessor into
 * binding[i - first] (-1: none); -1 with a ValueError where a predecessor does not come first.
 * Only the window is written: a schedule from a source late in a big step walks what follows it,
 * up to its last sink, not the whole graph (rocprof-908's step: 48,000 schedules of 45,000 nodes). */
static int walk_from(const int64_t *offsets, const int64_t *preds, const int64_t *lags, const int64_t *durs,
                     const int64_t *shorts, const int64_t *types, const int64_t *anchors, Py_ssize_t first,
                     Py_ssize_t from, Py_ssize_t stop, long long column, int64_t *starts, int64_t *binding) {
    for (Py_ssize_t i = from; i < stop; i++) {
        int64_t lo = offsets[i], hi = offsets[i + 1];
        if (binding) binding[i - first] = -1;
        if (lo == hi) {
            starts[i - first] = anchors[i];
            continue;
        }
        int64_t start = NEVER, best = -1, best_at = NEVER;
        for (int64_t k = lo; k < hi; k++) {
            int64_t p = preds[k];
            if (p < 0 || p >= i) {
                PyErr_SetString(PyExc_ValueError, "predecessors come first");
                return -1;
            }
            if (p < first || starts[p - first] == NEVER) continue;
            int64_t dur = column >= 0 && types[p] == column ? shorts[p] : durs[p];
            int64_t at = starts[p - first] + dur + lags[k];
            if (at > start) start = at;
            /* Graph.binding: the latest end plus lag; ties: the latest added */
            if (at > best_at || (at == best_at && best >= 0 && p > best)) {
                best = p;
                best_at = at;
            }
        }
        starts[i - first] = start;
        if (binding) binding[i - first] = best;
    }
    return 0;
}

/* walk_from the window's first node: the whole window */
static int walk(const int64_t *offsets, const int64_t *preds, const int64_t *lags, const int64_t *durs,
                const int64_t *shorts, const int64_t *types, const int64_t *anchors, Py_ssize_t first,
                Py_ssize_t stop, long long column, int64_t *starts, int64_t *binding) {
    return walk_from(offsets, preds, lags, durs, shorts, types, anchors, first, first, stop, column, starts, binding);
}

static PyObject *schedule(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "schedule(offsets, preds, lags, durs, short, types, anchors, first, stop, column)");
        return NULL;
    }
    Py_buffer b[7];
    int held = 0;
    PyObject *result = NULL, *starts_out = NULL, *binding_out = NULL;
    Py_ssize_t first = PyLong_AsSsize_t(args[7]), stop = PyLong_AsSsize_t(args[8]);
    long long column = PyLong_AsLongLong(args[9]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t n;
    if ((held = view_graph(args, b, 7, GRAPH_COLUMNS, &n)) < 7) goto done;
    const int64_t *offsets = b[0].buf, *preds = b[1].buf, *lags = b[2].buf, *durs = b[3].buf,
                  *shorts = b[4].buf, *types = b[5].buf, *anchors = b[6].buf;
    if (first < 0 || first > stop || stop > n) {
        PyErr_SetString(PyExc_ValueError, "schedule: not 0 <= first <= stop <= nodes");
        goto done;
    }
    Py_ssize_t window = (stop - first) * (Py_ssize_t)sizeof(int64_t);
    if (!(starts_out = PyBytes_FromStringAndSize(NULL, window))) goto done;
    if (!(binding_out = PyBytes_FromStringAndSize(NULL, window))) goto done;
    int64_t *starts = (int64_t *)PyBytes_AS_STRING(starts_out);
    int64_t *binding = (int64_t *)PyBytes_AS_STRING(binding_out);
    if (walk(offsets, preds, lags, durs, shorts, types, anchors, first, stop, column, starts, binding) < 0)
        goto done;
    result = PyTuple_Pack(2, starts_out, binding_out);
done:
    Py_XDECREF(starts_out);
    Py_XDECREF(binding_out);
    for (int k = 0; k < held; k++) PyBuffer_Release(&b[k]);
    return result;
}

/* int64s written into a growing byte buffer (_buffer.h's Buf) */
static inline int put_int64(Buf *b, int64_t value) { return buf_put(b, (const char *)&value, sizeof value); }
static inline int64_t *int64s(const Buf *b) { return (int64_t *)b->data; }
static inline Py_ssize_t count(const Buf *b) { return b->len / (Py_ssize_t)sizeof(int64_t); }

/* The columns as a tuple of bytes of int64 each; NULL with the error set. */
static PyObject *columns_as_bytes(const Buf *columns, int n) {
    PyObject *out = PyTuple_New(n);
    for (int c = 0; out && c < n; c++) {
        PyObject *bytes = PyBytes_FromStringAndSize(columns[c].data, columns[c].len);
        if (!bytes) Py_CLEAR(out);
        else PyTuple_SET_ITEM(out, c, bytes);
    }
    return out;
}

/* pairs(offsets, preds, lags, durs, observed, sources, sinks) -> (sources, sinks, lags): bytes of
 * int64 each, a pair per (source, sink) the source reaches, in contract's order (the anchors first,
 * as source -1, then each source; per source, the sinks in their order, less the source itself), its
 * lag the sink's start minus the source's end: dependency_graph._pairs_rule, one schedule per
 * source (from the anchors: each at its observed start but the sources, never reached; from a
 * source: only it, at its observed start, the nodes before it never reached). */
static PyObject *pairs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "pairs(offsets, preds, lags, durs, observed, sources, sinks)");
        return NULL;
    }
    Py_buffer b[7];
    int held = 0;
    PyObject *result = NULL;
    int64_t *starts = NULL, *anchors = NULL;
    Buf out[3] = {{0}};
    static const char *const names[5] = {"offsets", "preds", "lags", "durs", "observed"};
    Py_ssize_t n;
    if ((held = view_graph(args, b, 5, names, &n)) < 5) goto done;
    const int64_t *offsets = b[0].buf;
    for (; held < 7; held++)
        if (PyObject_GetBuffer(args[held], &b[held], PyBUF_SIMPLE) < 0) goto done;
    const int64_t *preds = b[1].buf, *lags = b[2].buf, *durs = b[3].buf, *observed = b[4].buf,
                  *sources = b[5].buf, *sinks = b[6].buf;
    Py_ssize_t n_sources = b[5].len / (Py_ssize_t)sizeof(int64_t), n_sinks = b[6].len / (Py_ssize_t)sizeof(int64_t);
    for (Py_ssize_t k = 0; k < n_sources + n_sinks; k++) {
        int64_t node = k < n_sources ? sources[k] : sinks[k - n_sources];
        if (node < 0 || node >= n) { PyErr_SetString(PyExc_ValueError, "pairs: a node outside the graph"); goto done; }
    }
    starts = PyMem_Malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    anchors = PyMem_Malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!starts || !anchors) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t k = -1; k < n_sources; k++) {
        int64_t source = k < 0 ? -1 : sources[k], base = 0;
        if (source < 0) {
            memcpy(anchors, observed, sizeof(int64_t) * (size_t)n);
            for (Py_ssize_t j = 0; j < n_sources; j++) anchors[sources[j]] = NEVER;
        } else {
            anchors[source] = observed[source];  /* the nodes after it without edges in: never reached */
            for (Py_ssize_t i = source + 1; i < n; i++) anchors[i] = NEVER;
        }
        int64_t first = source < 0 ? 0 : source;
        if (walk(offsets, preds, lags, durs, NULL, NULL, anchors, first, n, -1, starts, NULL) < 0) goto done;
        if (source >= 0) base = starts[0] + durs[source];
        for (Py_ssize_t j = 0; j < n_sinks; j++) {
            int64_t sink = sinks[j];
            if (sink == source || sink < first || starts[sink - first] == NEVER) continue;
            if (put_int64(&out[0], source) < 0 || put_int64(&out[1], sink) < 0
                || put_int64(&out[2], starts[sink - first] - base) < 0) goto done;
        }
    }
    result = columns_as_bytes(out, 3);
done:
    PyMem_Free(starts);
    PyMem_Free(anchors);
    for (int c = 0; c < 3; c++) PyMem_Free(out[c].data);
    for (int k = 0; k < held; k++) PyBuffer_Release(&b[k]);
    return result;
}

/* chains(binding, first, sinks, types) -> (nodes, before, tips, type_offsets, type_columns): bytes of
 * int64 each, dependency_graph._chains_rule: the tree of the chains to ``sinks`` along each node's
 * binding predecessor (binding: schedule's, of the nodes from ``first`` on, -1 for none), each node
 * walked once, where a chain first reaches it (nodes[k] comes after nodes[before[k]], -1: first;
 * tips: each sink's place); and per sink the op type columns on its chain (types: the graph's, -1
 * for none), type_columns[type_offsets[j]:type_offsets[j + 1]] for sink j, each once, in column order. */
/* The tree of chains to ``sinks`` (chains()'s five columns, into out[0..4]) along ``binding``, the
 * binding predecessors of the window's n nodes first..first+n-1; ``types``: the window's op type
 * columns (types[i] of node first + i), below n_types. 0, or -1 with the error set. */
static int int64_order(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int chain_tree(const int64_t *binding, Py_ssize_t first, Py_ssize_t n, const int64_t *sinks,
                      Py_ssize_t n_sinks, const int64_t *types, int64_t n_types, Buf out[5]) {
    int rc = -1;
    Buf walked = {0};
    int64_t *at = PyMem_Malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    int64_t *stamp = PyMem_Malloc(sizeof(int64_t) * (size_t)(n_types ? n_types : 1));
    if (!at || !stamp) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < n; i++) at[i] = -1;
    for (int64_t t = 0; t < n_types; t++) stamp[t] = -1;
    if (put_int64(&out[3], 0) < 0) goto done;
    for (Py_ssize_t j = 0; j < n_sinks; j++) {
        int64_t sink = sinks[j] - first;
        if (sink < 0 || sink >= n) { PyErr_SetString(PyExc_ValueError, "chains: a sink outside the window"); goto done; }
        if (at[sink] < 0) {
            walked.len = 0;
            int64_t node = sink;
            while (node >= 0 && at[node] < 0) {
                if (put_int64(&walked, node) < 0) goto done;
                node = binding[node] < 0 ? -1 : binding[node] - first;
            }
            int64_t link = node >= 0 ? at[node] : -1;
            for (Py_ssize_t k = count(&walked) - 1; k >= 0; k--) {
                at[int64s(&walked)[k]] = count(&out[0]);
                if (put_int64(&out[0], int64s(&walked)[k] + first) < 0 || put_int64(&out[1], link) < 0) goto done;
                link = at[int64s(&walked)[k]];
            }
        }
        if (put_int64(&out[2], at[sink]) < 0) goto done;
        Py_ssize_t mine = count(&out[4]);
        for (int64_t k = at[sink]; k >= 0; k = int64s(&out[1])[k]) {  /* the op types on its chain, once */
            int64_t t = types[int64s(&out[0])[k] - first];
            if (t >= 0 && stamp[t] != j) {
                stamp[t] = j;
                if (put_int64(&out[4], t) < 0) goto done;
            }
        }
        /* in column order: the op types' names are sorted, so by name, as the rule fills by_type */
        qsort(int64s(&out[4]) + mine, (size_t)(count(&out[4]) - mine), sizeof(int64_t), int64_order);
        if (put_int64(&out[3], count(&out[4])) < 0) goto done;
    }
    rc = 0;
done:
    PyMem_Free(at);
    PyMem_Free(stamp);
    PyMem_Free(walked.data);
    return rc;
}

/* The window's binding predecessors and op types checked (binding[i] of node first + i: -1, or a
 * node of the window before it): the number of op type columns, or -1 with the error set. */
static int64_t checked_window(const int64_t *binding, Py_ssize_t first, Py_ssize_t n, const int64_t *types) {
    int64_t n_types = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (binding[i] < -1 || binding[i] >= first + i || (binding[i] >= 0 && binding[i] < first) || types[i] < -1) {
            PyErr_SetString(PyExc_ValueError, "chains: a binding predecessor or type out of range");
            return -1;
        }
        if (types[i] + 1 > n_types) n_types = types[i] + 1;
    }
    return n_types;
}

static PyObject *chains(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "chains(binding, first, sinks, types)");
        return NULL;
    }
    Py_ssize_t first = PyLong_AsSsize_t(args[1]);
    if (first == -1 && PyErr_Occurred()) return NULL;
    Py_buffer b[3];
    int held = 0;
    PyObject *result = NULL;
    Buf out[5] = {{0}};  /* nodes, before, tips, type offsets, type columns */
    if (PyObject_GetBuffer(args[0], &b[0], PyBUF_SIMPLE) < 0) return NULL;
    held = 1;
    Py_ssize_t n = b[0].len / (Py_ssize_t)sizeof(int64_t);  /* the window's nodes: first..first+n-1 */
    if (PyObject_GetBuffer(args[2], &b[1], PyBUF_SIMPLE) < 0) goto done;
    held = 2;
    if (PyObject_GetBuffer(args[3], &b[2], PyBUF_SIMPLE) < 0) goto done;
    held = 3;
    if (first < 0 || b[2].len / (Py_ssize_t)sizeof(int64_t) < first + n) {
        PyErr_SetString(PyExc_ValueError, "chains: the window is not within the graph's types");
        goto done;
    }
    const int64_t *binding = b[0].buf, *sinks = b[1].buf, *types = (const int64_t *)b[2].buf + first;
    int64_t n_types = checked_window(binding, first, n, types);
    if (n_types < 0) goto done;
    if (chain_tree(binding, first, n, sinks, b[1].len / (Py_ssize_t)sizeof(int64_t), types, n_types, out) < 0)
        goto done;
    result = columns_as_bytes(out, 5);
done:
    for (int c = 0; c < 5; c++) PyMem_Free(out[c].data);
    for (int k = 0; k < held; k++) PyBuffer_Release(&b[k]);
    return result;
}

/* typed(offsets, preds, lags, durs, short, types, anchors, first, stop, sinks, source) -> (nodes,
 * before, tips, type_offsets, type_columns, type_lags): bytes of int64 each, one source's part of
 * contract (dependency_graph._typed_chains_rule) in one call: its schedule from ``anchors`` over
 * first..stop-1, the tree of chains to ``sinks`` (chains()'s five columns), and for each op type
 * column on a sink's chain (type_columns[k]) the sink's lag with that type's nodes short
 * (type_lags[k]): its start less the source's end (source -1, the anchors: less 0), one schedule per
 * op type (in Python, 48,000 calls on rocprof-908's one step). */
static PyObject *typed(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "typed(offsets, preds, lags, durs, short, types, anchors, first, stop, sinks, source)");
        return NULL;
    }
    Py_buffer b[8];
    int held = 0;
    PyObject *result = NULL;
    int64_t *starts = NULL, *binding = NULL, *again = NULL;
    int64_t *from = NULL, *until = NULL;
    Buf out[6] = {{0}};  /* chains()'s five columns, then each type column's lag */
    Py_ssize_t first = PyLong_AsSsize_t(args[7]), stop = PyLong_AsSsize_t(args[8]);
    long long source = PyLong_AsLongLong(args[10]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t n;
    if ((held = view_graph(args, b, 7, GRAPH_COLUMNS, &n)) < 7) goto done;
    if (PyObject_GetBuffer(args[9], &b[7], PyBUF_SIMPLE) < 0) goto done;
    held = 8;
    const int64_t *offsets = b[0].buf, *preds = b[1].buf, *lags = b[2].buf, *durs = b[3].buf,
                  *shorts = b[4].buf, *types = b[5].buf, *anchors = b[6].buf, *sinks = b[7].buf;
    Py_ssize_t n_sinks = b[7].len / (Py_ssize_t)sizeof(int64_t), w = stop - first;
    if (first < 0 || first > stop || stop > n || source < -1 || source >= stop || (source >= 0 && source != first)) {
        PyErr_SetString(PyExc_ValueError, "typed: not 0 <= first <= stop <= nodes, the source first");
        goto done;
    }
    starts = PyMem_Malloc(sizeof(int64_t) * (size_t)(w ? w : 1));
    binding = PyMem_Malloc(sizeof(int64_t) * (size_t)(w ? w : 1));
    again = PyMem_Malloc(sizeof(int64_t) * (size_t)(w ? w : 1));
    if (!starts || !binding || !again) { PyErr_NoMemory(); goto done; }
    if (walk(offsets, preds, lags, durs, shorts, types, anchors, first, stop, -1, starts, binding) < 0) goto done;
    int64_t n_types = checked_window(binding, first, w, types + first);
    if (n_types < 0 || chain_tree(binding, first, w, sinks, n_sinks, types + first, n_types, out) < 0) goto done;
    Py_ssize_t entries = count(&out[4]);
    const int64_t *columns = int64s(&out[4]), *type_offsets = int64s(&out[3]);
    if (buf_reserve(&out[5], entries * (Py_ssize_t)sizeof(int64_t)) < 0) goto done;
    out[5].len = entries * (Py_ssize_t)sizeof(int64_t);
    int64_t *type_lags = int64s(&out[5]);
    /* per op type column: the first node of that type in the window and the end of its last sink's
     * chain: before the first, its schedule is the one walked; after the last, nothing is read */
    if (!(from = PyMem_Malloc(sizeof(int64_t) * (size_t)(n_types ? n_types : 1)))
        || !(until = PyMem_Calloc((size_t)(n_types ? n_types : 1), sizeof(int64_t)))) { PyErr_NoMemory(); goto done; }
    for (int64_t t = 0; t < n_types; t++) from[t] = -1;
    for (Py_ssize_t i = first; i < stop; i++)
        if (types[i] >= 0 && from[types[i]] < 0) from[types[i]] = i;
    for (Py_ssize_t j = 0; j < n_sinks; j++)
        for (int64_t k = type_offsets[j]; k < type_offsets[j + 1]; k++)
            if (sinks[j] + 1 > until[columns[k]]) until[columns[k]] = sinks[j] + 1;
    for (int64_t column = 0; column < n_types; column++) {  /* one schedule per op type on a chain */
        if (!until[column]) continue;
        memcpy(again, starts, sizeof(int64_t) * (size_t)(from[column] - first));
        if (walk_from(offsets, preds, lags, durs, shorts, types, anchors, first, from[column], until[column],
                      column, again, NULL) < 0) goto done;
        int64_t began = source < 0 ? 0 : again[0] + (types[source] == column ? shorts[source] : durs[source]);
        for (Py_ssize_t j = 0; j < n_sinks; j++)
            for (int64_t k = type_offsets[j]; k < type_offsets[j + 1]; k++)
                if (columns[k] == column) type_lags[k] = again[sinks[j] - first] - began;
    }
    result = columns_as_bytes(out, 6);
done:
    PyMem_Free(starts);
    PyMem_Free(binding);
    PyMem_Free(again);
    PyMem_Free(from);
    PyMem_Free(until);
    for (int c = 0; c < 6; c++) PyMem_Free(out[c].data);
    for (int k = 0; k < held; k++) PyBuffer_Release(&b[k]);
    return result;
}

/* undominated's pairs of one source: by sink, each with its lag and its place in the input */
typedef struct { int64_t sink, lag, index; } Pair;

static int pair_order(const void *a, const void *b) {
    const Pair *x = a, *y = b;
    return x->sink < y->sink ? -1 : x->sink > y->sink;
}

/* The pair of sorted[0..n) to ``sink``, or -1 */
static Py_ssize_t pair_to(const Pair *sorted, Py_ssize_t n, int64_t sink) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (sorted[mid].sink < sink) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && sorted[lo].sink == sink ? lo : -1;
}

/* A source's pairs not yet dominated: open[0..left) (places in undominated's ``by``), and each
 * one's place in open by its sink (place[sink], -1: not held) */
typedef struct { Py_ssize_t *open; int64_t *place; Py_ssize_t left; } Held;

/* Drops the held pair at open[w] where ``through`` (a chain through one synchronisation point) is
 * as long as its own lag, marking it not kept: 1 if dropped (open[w] is then the last one held). */
static int drop_if_as_long(Held *h, const Pair *by, Py_ssize_t w, int64_t through, char *kept) {
    const Pair *p = &by[h->open[w]];
    if (through < p->lag) return 0;
    kept[p->index] = 0;
    h->place[p->sink] = -1;
    if (w != --h->left) {
        h->open[w] = h->open[h->left];
        h->place[by[h->open[w]].sink] = w;
    }
    return 1;
}

/* A binary search's steps over n: floor(log2(n)) + 1 */
static int bits(Py_ssize_t n) {
    int b = 1;
    while (n >>= 1) b++;
    return b;
}

/* undominated(sources, sinks, lags, arrivals, dones) -> bytes: contract's pairs (source, sink, lag:
 * array('q') each, a source -1 for the anchors) and its synchronisation points (each arrival's
 * completion), a byte per pair, 1 where it is kept: dependency_graph._undominated_rule. Per source,
 * the sinks not yet dominated are held, and its arrivals taken in sink order (the nearest first,
 * which leaves few: 383,000 of rocprof-908's 388,000 pairs are dominated): through each, either
 * each held sink is looked up among the completion's pairs (sorted by sink), or the completion's
 * pairs are walked against the held ones, whichever costs less; so the work is never more than
 * walking every completion's pairs (the rule's), and mostly far less. Node ids are >= 0, each
 * (source, sink) once. */
static PyObject *undominated(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "undominated(sources, sinks, lags, arrivals, dones)");
        return NULL;
    }
    Py_buffer b[5];
    int held = 0;
    PyObject *kept_out = NULL;
    int64_t *from = NULL, *done_of = NULL, *place = NULL;
    Py_ssize_t *open = NULL;
    Pair *by = NULL;
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
    from = PyMem_Calloc((size_t)ids + 2, sizeof(int64_t));  /* slot s's pairs: by[from[s]:from[s + 1]] */
    done_of = PyMem_Malloc(sizeof(int64_t) * (size_t)(ids ? ids : 1));
    place = PyMem_Malloc(sizeof(int64_t) * (size_t)(ids ? ids : 1));  /* a held sink's place in open */
    open = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));  /* the source's held pairs (in by) */
    by = PyMem_Malloc(sizeof(Pair) * (size_t)(n ? n : 1));
    if (!from || !done_of || !place || !open || !by) { PyErr_NoMemory(); goto done; }
    for (int64_t i = 0; i < ids; i++) done_of[i] = -1, place[i] = -1;
    for (Py_ssize_t k = 0; k < m; k++) done_of[arrival[k]] = done_at[k];  /* a dict: the last one said */
    for (Py_ssize_t i = 0; i < n; i++) from[src[i] + 2]++;  /* by slot, in input order, then by sink */
    for (int64_t s = 1; s <= ids + 1; s++) from[s] += from[s - 1];
    for (Py_ssize_t i = 0; i < n; i++) by[from[src[i] + 1]++] = (Pair){sink[i], lag[i], i};
    for (int64_t s = ids; s > 0; s--) from[s] = from[s - 1];
    from[0] = 0;
    for (int64_t s = 0; s <= ids; s++) {
        Pair *mine = by + from[s];
        Py_ssize_t count = from[s + 1] - from[s];
        for (Py_ssize_t i = 1; i < count; i++)
            if (mine[i - 1].sink > mine[i].sink) { qsort(mine, (size_t)count, sizeof(Pair), pair_order); break; }
    }
    if (!(kept_out = PyBytes_FromStringAndSize(NULL, n))) goto done;
    char *kept = PyBytes_AS_STRING(kept_out);
    memset(kept, 1, (size_t)n);
    Held held_sinks = {open, place, 0};
    for (int64_t s = 0; s <= ids; s++) {
        Py_ssize_t lo = from[s], hi = from[s + 1];
        held_sinks.left = 0;
        for (Py_ssize_t i = lo; i < hi; i++) {
            place[by[i].sink] = held_sinks.left;
            open[held_sinks.left++] = i;
        }
        for (Py_ssize_t a = lo; a < hi && held_sinks.left > 0; a++) {  /* through each arrival, nearest first */
            int64_t done = done_of[by[a].sink], reach = by[a].lag;
            if (done < 0) continue;
            const Pair *theirs = by + from[done + 1];
            Py_ssize_t count = from[done + 2] - from[done + 1];
            if (count == 0) continue;
            if ((int64_t)held_sinks.left * bits(count) < count) {  /* each held sink looked up */
                for (Py_ssize_t w = 0; w < held_sinks.left;) {
                    int64_t t = by[held_sinks.open[w]].sink;
                    Py_ssize_t q = t == by[a].sink ? -1 : pair_to(theirs, count, t);
                    if (q < 0 || !drop_if_as_long(&held_sinks, by, w, reach + theirs[q].lag, kept)) w++;
                }
            } else {  /* the completion's pairs walked */
                for (Py_ssize_t q = 0; q < count && held_sinks.left > 0; q++) {
                    int64_t t = theirs[q].sink;
                    if (t != by[a].sink && held_sinks.place[t] >= 0)
                        drop_if_as_long(&held_sinks, by, held_sinks.place[t], reach + theirs[q].lag, kept);
                }
            }
        }
        for (Py_ssize_t w = 0; w < held_sinks.left; w++) place[by[open[w]].sink] = -1;
    }
done:
    if (PyErr_Occurred()) Py_CLEAR(kept_out);
    PyMem_Free(from);
    PyMem_Free(done_of);
    PyMem_Free(place);
    PyMem_Free(open);
    PyMem_Free(by);
    for (int k = 0; k < held; k++) PyBuffer_Release(&b[k]);
    return kept_out;
}

/* rank_edges's items in the order they are taken: by start, then kind, then as given */
typedef struct { int64_t start, kind, index; } Item;

static int item_order(const void *a, const void *b) {
    const Item *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The latest (end, node) of ``ended`` (n of them, sorted) with end <= at: its node, or -1. */
static int64_t latest_ended(const int64_t *ended, Py_ssize_t n, int64_t at) {
    Py_ssize_t lo = 0, hi = n;  /* the first entry with end > at */
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (ended[2 * mid] <= at) lo = mid + 1; else hi = mid;
    }
    return lo > 0 ? ended[2 * (lo - 1) + 1] : -1;
}

/* (end, node) into ``ended`` (n of them, room for one more), kept sorted; after equal ones */
static void insert_ended(int64_t *ended, Py_ssize_t n, int64_t end, int64_t node) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (ended[2 * mid] < end || (ended[2 * mid] == end && ended[2 * mid + 1] <= node)) lo = mid + 1;
        else hi = mid;
    }
    memmove(ended + 2 * (lo + 1), ended + 2 * lo, sizeof(int64_t) * 2 * (size_t)(n - lo));
    ended[2 * lo] = end;
    ended[2 * lo + 1] = node;
}

#define RANK_OP 1
#define RANK_HOST 2
#define RANK_TASK 3
#define MOST_BEFORE 64  /* a node's predecessors held on the stack; more go through the heap */

/* One node added after ``before`` (n of them, any order, repeats): its edges, sorted and each once,
 * all with the lag of its start after their latest end (Graph.add). 0, or -1 with the error set. */
static int add_node(Buf out[4], int64_t *node_ends, Py_ssize_t *nodes, int64_t start, int64_t dur,
                    int64_t *before, Py_ssize_t n) {
    for (Py_ssize_t a = 1; a < n; a++)  /* insertion sort: a handful */
        for (Py_ssize_t b = a; b > 0 && before[b - 1] > before[b]; b--) {
            int64_t t = before[b]; before[b] = before[b - 1]; before[b - 1] = t;
        }
    int64_t latest = 0;
    int any = 0;
    for (Py_ssize_t k = 0; k < n; k++)
        if (!any || node_ends[before[k]] > latest) latest = node_ends[before[k]], any = 1;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (k > 0 && before[k] == before[k - 1]) continue;
        if (put_int64(&out[2], before[k]) < 0 || put_int64(&out[3], start - latest) < 0) return -1;
    }
    if (put_int64(&out[1], count(&out[2])) < 0) return -1;
    node_ends[(*nodes)++] = start + dur;
    return 0;
}

/* rank_edges(kinds, starts, at, durs, ends, lanes, in_offsets, flows_in, out_offsets, flows_out)
 * -> (order, offsets, preds, lags): dependency_graph.rank_edges_rule, the columns of RankItems
 * (int64 each; lanes and arrows numbered from 0), bytes of int64 each. */
static PyObject *rank_edges(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "rank_edges(kinds, starts, at, durs, ends, lanes, in_offsets, flows_in, "
                                         "out_offsets, flows_out)");
        return NULL;
    }
    Py_buffer b[10];
    int held = 0;
    PyObject *result = NULL;
    Item *items = NULL;
    int64_t *node_ends = NULL, *last = NULL, *ended = NULL, *launched = NULL, *heap_before = NULL;
    Buf out[4] = {{0}};  /* order, offsets (from 0), preds, lags */
    for (; held < 10; held++)
        if (PyObject_GetBuffer(args[held], &b[held], PyBUF_SIMPLE) < 0) goto done;
    Py_ssize_t n = b[0].len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *kinds = b[0].buf, *starts = b[1].buf, *at = b[2].buf, *durs = b[3].buf, *ends = b[4].buf,
                  *lanes = b[5].buf, *in_offsets = b[6].buf, *flows_in = b[7].buf, *out_offsets = b[8].buf,
                  *flows_out = b[9].buf;
    Py_ssize_t n_in = b[7].len / (Py_ssize_t)sizeof(int64_t), n_out = b[9].len / (Py_ssize_t)sizeof(int64_t);
    for (int k = 1; k < 6; k++)
        if (b[k].len != b[0].len) { PyErr_SetString(PyExc_ValueError, "rank_edges: columns of unequal length"); goto done; }
    if (b[6].len != (n + 1) * (Py_ssize_t)sizeof(int64_t) || b[8].len != (n + 1) * (Py_ssize_t)sizeof(int64_t)
        || in_offsets[0] != 0 || out_offsets[0] != 0 || in_offsets[n] != n_in || out_offsets[n] != n_out) {
        PyErr_SetString(PyExc_ValueError, "rank_edges: arrow offsets not of the items");
        goto done;
    }
    int64_t n_lanes = 0, n_flows = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (kinds[i] < RANK_OP || kinds[i] > RANK_TASK || lanes[i] < 0 || in_offsets[i] > in_offsets[i + 1]
            || out_offsets[i] > out_offsets[i + 1]) {
            PyErr_SetString(PyExc_ValueError, "rank_edges: a kind, lane or arrow offset out of range");
            goto done;
        }
        if (lanes[i] + 1 > n_lanes) n_lanes = lanes[i] + 1;
    }
    for (Py_ssize_t k = 0; k < n_in + n_out; k++) {
        int64_t f = k < n_in ? flows_in[k] : flows_out[k - n_in];
        if (f < 0) { PyErr_SetString(PyExc_ValueError, "rank_edges: an arrow below 0"); goto done; }
        if (f + 1 > n_flows) n_flows = f + 1;
    }
    items = PyMem_Malloc(sizeof(Item) * (size_t)(n ? n : 1));
    node_ends = PyMem_Malloc(sizeof(int64_t) * (size_t)(2 * n + 1));
    last = PyMem_Malloc(sizeof(int64_t) * (size_t)(n_lanes ? n_lanes : 1));
    ended = PyMem_Malloc(sizeof(int64_t) * 2 * (size_t)(n ? n : 1));
    launched = PyMem_Malloc(sizeof(int64_t) * (size_t)(n_flows ? n_flows : 1));
    if (!items || !node_ends || !last || !ended || !launched) { PyErr_NoMemory(); goto done; }
    for (int64_t k = 0; k < n_lanes; k++) last[k] = -1;
    for (int64_t k = 0; k < n_flows; k++) launched[k] = -1;
    for (Py_ssize_t i = 0; i < n; i++) items[i] = (Item){starts[i], kinds[i], i};
    qsort(items, (size_t)n, sizeof(Item), item_order);
    if (put_int64(&out[1], 0) < 0) goto done;
    Py_ssize_t nodes = 0, n_ended = 0, room = MOST_BEFORE;
    int64_t stack_before[MOST_BEFORE], *before = stack_before;
    for (Py_ssize_t j = 0; j < n; j++) {
        Py_ssize_t i = items[j].index;
        int64_t kind = kinds[i], lane = lanes[i];
        if (put_int64(&out[0], i) < 0) goto done;
        Py_ssize_t arrows = kind == RANK_HOST ? 0 : in_offsets[i + 1] - in_offsets[i];
        if (arrows + 2 > room) {  /* an item with many arrows in */
            PyMem_Free(heap_before);
            room = arrows + 2;
            if (!(heap_before = PyMem_Malloc(sizeof(int64_t) * (size_t)room))) { PyErr_NoMemory(); goto done; }
            before = heap_before;
        }
        Py_ssize_t m = 0;
        for (Py_ssize_t k = in_offsets[i]; kind != RANK_HOST && k < in_offsets[i + 1]; k++)
            if (launched[flows_in[k]] >= 0) before[m++] = launched[flows_in[k]];
        if (last[lane] >= 0) before[m++] = last[lane];
        int64_t found = latest_ended(ended, n_ended, at[i]);
        if (found >= 0) before[m++] = found;
        if (kind == RANK_HOST) {
            if (add_node(out, node_ends, &nodes, starts[i], durs[i], before, m) < 0) goto done;
            for (Py_ssize_t k = out_offsets[i]; k < out_offsets[i + 1]; k++) launched[flows_out[k]] = nodes - 1;
            last[lane] = nodes - 1;
            continue;
        }
        if (kind == RANK_TASK) {
            if (add_node(out, node_ends, &nodes, starts[i], durs[i], before, m) < 0) goto done;
        } else if (add_node(out, node_ends, &nodes, starts[i], 0, before, m) < 0  /* the arrival */
                   || add_node(out, node_ends, &nodes, starts[i], durs[i], before, 0) < 0) {  /* the completion */
            goto done;
        }
        last[lane] = nodes - 1;
        insert_ended(ended, n_ended++, ends[i], nodes - 1);
    }
    result = columns_as_bytes(out, 4);
done:
    PyMem_Free(items);
    PyMem_Free(node_ends);
    PyMem_Free(last);
    PyMem_Free(ended);
    PyMem_Free(launched);
    PyMem_Free(heap_before);
    for (int c = 0; c < 4; c++) PyMem_Free(out[c].data);
    for (int k = 0; k < held; k++) PyBuffer_Release(&b[k]);
    return result;
}

static PyMethodDef methods[] = {
    {"schedule", (PyCFunction)(void (*)(void))schedule, METH_FASTCALL,
     "schedule(offsets, preds, lags, durs, short, types, anchors, first, stop, column) -> (starts, binding)"},
    {"pairs", (PyCFunction)(void (*)(void))pairs, METH_FASTCALL,
     "pairs(offsets, preds, lags, durs, observed, sources, sinks) -> (sources, sinks, lags)"},
    {"chains", (PyCFunction)(void (*)(void))chains, METH_FASTCALL,
     "chains(binding, first, sinks, types) -> (nodes, before, tips, type_offsets, type_columns)"},
    {"typed", (PyCFunction)(void (*)(void))typed, METH_FASTCALL,
     "typed(offsets, preds, lags, durs, short, types, anchors, first, stop, sinks, source) -> (nodes, before, tips, "
     "type_offsets, type_columns, type_lags)"},
    {"rank_edges", (PyCFunction)(void (*)(void))rank_edges, METH_FASTCALL,
     "rank_edges(kinds, starts, at, durs, ends, lanes, in_offsets, flows_in, out_offsets, flows_out) -> (order, "
     "offsets, preds, lags)"},
    {"undominated", (PyCFunction)(void (*)(void))undominated, METH_FASTCALL,
     "undominated(sources, sinks, lags, arrivals, dones) -> bytes: 1 for each pair contract keeps"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_dependency_graph", .m_doc = "The critical path's schedule of a rank's step, and its contraction's pairs.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__dependency_graph(void) { return PyModule_Create(&module); }
