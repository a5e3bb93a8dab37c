/* The overlap analysis' per-slice and per-interval work, in C: it runs once per slice of every
 * step, in summary too, where it was a third of the Python left (CANN 7/8 layouts).
 *
 * step_intervals(slices, stream, op, task, is_compute) -> (compute, ops, tasks, ops_seen): the
 * union (overlap.union: sorted, disjoint, touching intervals merged, empty ones dropped) of the
 * compute tasks (layer ``stream`` whose task type ``is_compute`` says is computation), of the
 * communication ops (layer ``op``) and of the communication tasks (layer ``task``); ops_seen
 * says whether there was any op at all, even of no length.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdlib.h>

#include "records.h"

typedef struct { long long start, end; } Span;
typedef struct { Span *items; Py_ssize_t len, cap; } Spans;

static PyObject *COMPUTE_TYPES;  /* {task type: bool}, is_compute's answers so far */
#define MAX_TYPES 4096

static int spans_add(Spans *s, long long start, long long end) {
    if (s->len == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 256;
        Span *grown = PyMem_Realloc(s->items, cap * sizeof(Span));
        if (!grown) { PyErr_NoMemory(); return -1; }
        s->items = grown;
        s->cap = cap;
    }
    s->items[s->len++] = (Span){start, end};
    return 0;
}

/* Two Python ints as 64-bit ones (a time and a length, or two times): -1 with an error if not */
static int two_ints(PyObject *a, PyObject *b, long long *x, long long *y) {
    int overflow = 0;
    *x = PyLong_AsLongLongAndOverflow(a, &overflow);
    if (!overflow && !PyErr_Occurred()) *y = PyLong_AsLongLongAndOverflow(b, &overflow);
    if (overflow) PyErr_SetString(PyExc_OverflowError, "a time past 2**63 ns");
    return PyErr_Occurred() ? -1 : 0;
}

/* An interval: a (start, end) tuple */
static int span_of(PyObject *pair, long long *start, long long *end) {
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != INTERVAL_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "not an interval");
        return -1;
    }
    return two_ints(PyTuple_GET_ITEM(pair, INTERVAL_START), PyTuple_GET_ITEM(pair, INTERVAL_END), start, end);
}

static int span_order(const void *a, const void *b) {
    const Span *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* overlap.union of the spans, in place: sorted, disjoint, touching ones merged, empty ones gone */
static void merge(Spans *s) {
    if (s->len > 1) qsort(s->items, s->len, sizeof(Span), span_order);
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < s->len; i++) {
        Span x = s->items[i];
        if (x.end <= x.start) continue;
        if (n && x.start <= s->items[n - 1].end) {
            if (x.end > s->items[n - 1].end) s->items[n - 1].end = x.end;
        } else {
            s->items[n++] = x;
        }
    }
    s->len = n;
}

_Static_assert(INTERVAL_START == 0 && INTERVAL_END == 1 && INTERVAL_FIELDS == 2, "list_of makes (start, end)");

static PyObject *list_of(const Spans *s) {  /* as a list of (start, end) tuples */
    PyObject *out = PyList_New(s->len);
    for (Py_ssize_t i = 0; out && i < s->len; i++) {
        PyObject *item = Py_BuildValue("(LL)", s->items[i].start, s->items[i].end);
        if (!item) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

static int compute_type(PyObject *task_type, PyObject *is_compute) {
    PyObject *known = PyDict_GetItemWithError(COMPUTE_TYPES, task_type);
    if (known) return known == Py_True;
    if (PyErr_Occurred()) return -1;
    PyObject *answer = PyObject_CallOneArg(is_compute, task_type);
    if (!answer) return -1;
    int yes = PyObject_IsTrue(answer);
    if (yes >= 0 && PyDict_GET_SIZE(COMPUTE_TYPES) < MAX_TYPES &&
        PyDict_SetItem(COMPUTE_TYPES, task_type, yes ? Py_True : Py_False) < 0) yes = -1;
    Py_DECREF(answer);
    return yes;
}

/* The unions step_intervals makes, and the StepIntervals it gives of them */
enum { COMPUTE, OPS, TASKS, UNIONS };

static PyObject *step_intervals_of(PyObject *const lists[UNIONS], int ops_seen) {
    PyObject *made = PyTuple_New(STEP_INTERVALS_FIELDS);
    if (!made) return NULL;
    PyTuple_SET_ITEM(made, STEP_INTERVALS_COMPUTE, Py_NewRef(lists[COMPUTE]));
    PyTuple_SET_ITEM(made, STEP_INTERVALS_OPS, Py_NewRef(lists[OPS]));
    PyTuple_SET_ITEM(made, STEP_INTERVALS_TASKS, Py_NewRef(lists[TASKS]));
    PyTuple_SET_ITEM(made, STEP_INTERVALS_OPS_SEEN, Py_NewRef(ops_seen ? Py_True : Py_False));
    return made;
}

static PyObject *step_intervals(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 5 || !PyList_CheckExact(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "step_intervals(slices: list, stream, op, task, is_compute)");
        return NULL;
    }
    PyObject *slices = argv[0], *result = NULL, *lists[UNIONS] = {NULL, NULL, NULL};
    Spans spans[UNIONS] = {{0}};
    int ops_seen = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(slices); i++) {
        PyObject *s = PyList_GET_ITEM(slices, i);
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) <= SLICE_TASK_TYPE) {
            PyErr_SetString(PyExc_TypeError, "not a Slice");
            goto done;
        }
        PyObject *layer = PyTuple_GET_ITEM(s, SLICE_LAYER);
        int which = layer == argv[1] ? COMPUTE : layer == argv[2] ? OPS : layer == argv[3] ? TASKS : -1;
        if (which < 0) continue;
        if (which == COMPUTE) {
            int yes = compute_type(PyTuple_GET_ITEM(s, SLICE_TASK_TYPE), argv[4]);
            if (yes < 0) goto done;
            if (!yes) continue;
        }
        ops_seen |= which == OPS;
        long long start = 0, dur = 0;
        if (two_ints(PyTuple_GET_ITEM(s, SLICE_START_NS), PyTuple_GET_ITEM(s, SLICE_DUR_NS), &start, &dur) < 0)
            goto done;
        if ((dur > 0 && start > LLONG_MAX - dur) || (dur < 0 && start < LLONG_MIN - dur)) {
            PyErr_SetString(PyExc_OverflowError, "a slice past 2**63 ns");
            goto done;
        }
        if (spans_add(&spans[which], start, start + dur) < 0) goto done;
    }
    for (int k = 0; k < UNIONS; k++) {
        merge(&spans[k]);
        if (!(lists[k] = list_of(&spans[k]))) goto done;
    }
    result = step_intervals_of(lists, ops_seen);
done:
    for (int k = 0; k < UNIONS; k++) { PyMem_Free(spans[k].items); Py_XDECREF(lists[k]); }
    return result;
}

/* Spans from a list of (start, end) pairs */
static int spans_of(PyObject *list, Spans *s) {
    if (!PyList_Check(list)) { PyErr_SetString(PyExc_TypeError, "intervals must be a list"); return -1; }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        long long start = 0, end = 0;
        if (span_of(PyList_GET_ITEM(list, i), &start, &end) < 0 || spans_add(s, start, end) < 0) return -1;
    }
    return 0;
}

/* overlap._subtract: the points of ``a`` (sorted, disjoint) not in the union ``b`` */
static int subtract_into(const Spans *a, const Spans *b, Spans *out) {
    Py_ssize_t j = 0;
    for (Py_ssize_t i = 0; i < a->len; i++) {
        long long start = a->items[i].start, end = a->items[i].end, cursor = start;
        while (j < b->len && b->items[j].end <= start) j++;
        for (Py_ssize_t k = j; k < b->len && b->items[k].start < end; k++) {
            if (b->items[k].start > cursor && spans_add(out, cursor, b->items[k].start) < 0) return -1;
            if (b->items[k].end > cursor) cursor = b->items[k].end;
        }
        if (cursor < end && spans_add(out, cursor, end) < 0) return -1;
    }
    return 0;
}

/* lanes(computing, communication, span) -> (not_overlapped, free): overlap.analyse_unions's two
 * derived lanes, from the unions of the compute and of the communication intervals and the
 * profiler's span of the step (or None) */
static PyObject *lanes(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 3) {
        PyErr_SetString(PyExc_TypeError, "lanes(computing, communication, span)");
        return NULL;
    }
    Spans computing = {0}, communication = {0}, busy = {0}, bounds = {0}, alone = {0}, free = {0};
    PyObject *result = NULL, *alone_list = NULL, *free_list = NULL;
    if (spans_of(argv[0], &computing) < 0 || spans_of(argv[1], &communication) < 0) goto done;
    if (argv[2] != Py_None) {  /* the span counts where it is not empty */
        long long start = 0, end = 0;
        if (span_of(argv[2], &start, &end) < 0 || (start < end && spans_add(&bounds, start, end) < 0)) goto done;
    }
    for (int k = 0; k < 2; k++) {
        const Spans *from = k ? &communication : &computing;
        for (Py_ssize_t i = 0; i < from->len; i++)
            if (spans_add(&busy, from->items[i].start, from->items[i].end) < 0) goto done;
    }
    merge(&busy);
    if (busy.len) {  /* from the first to the last busy instant, and over the span */
        long long low = busy.items[0].start, high = busy.items[busy.len - 1].end;
        if (bounds.len) {
            if (bounds.items[0].start < low) low = bounds.items[0].start;
            if (bounds.items[0].end > high) high = bounds.items[0].end;
        }
        bounds.len = 0;
        if (spans_add(&bounds, low, high) < 0) goto done;
    }
    if (subtract_into(&communication, &computing, &alone) < 0 || subtract_into(&bounds, &busy, &free) < 0) goto done;
    if ((alone_list = list_of(&alone)) && (free_list = list_of(&free)))
        result = PyTuple_Pack(2, alone_list, free_list);
done:
    PyMem_Free(computing.items); PyMem_Free(communication.items); PyMem_Free(busy.items);
    PyMem_Free(bounds.items); PyMem_Free(alone.items); PyMem_Free(free.items);
    Py_XDECREF(alone_list); Py_XDECREF(free_list);
    return result;
}

/* slices(lanes, rank, layer, Slice) -> [Slice(rank, layer, lane, lane, start, end - start), ...]
 * for each lane name and its intervals, in order (profile.overlap_slices); the fields after
 * them take Slice's defaults */
static PyObject *slices(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 4 || !PyDict_Check(argv[0]) || !PyType_Check(argv[3])) {
        PyErr_SetString(PyExc_TypeError, "slices(lanes: dict, rank, layer, Slice)");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)argv[3];
    PyObject *out = PyList_New(0), *lane, *intervals, *empty = PyTuple_New(0), *blank = PyUnicode_FromString("");
    Py_ssize_t pos = 0;
    if (!out || !empty || !blank) goto fail;
    while (PyDict_Next(argv[0], &pos, &lane, &intervals)) {
        Spans s = {0};
        if (spans_of(intervals, &s) < 0) { PyMem_Free(s.items); goto fail; }
        for (Py_ssize_t i = 0; i < s.len; i++) {
            PyObject *made = type->tp_alloc(type, SLICE_FIELDS);
            PyObject *start = made ? PyLong_FromLongLong(s.items[i].start) : NULL;
            PyObject *dur = start ? PyLong_FromLongLong(s.items[i].end - s.items[i].start) : NULL;
            if (!dur) { Py_XDECREF(made); Py_XDECREF(start); PyMem_Free(s.items); goto fail; }
            PyObject *items[SLICE_FIELDS] = {
                [SLICE_RANK] = argv[1], [SLICE_LAYER] = argv[2], [SLICE_LANE] = lane, [SLICE_NAME] = lane,
                [SLICE_START_NS] = start, [SLICE_DUR_NS] = dur, [SLICE_ARGS] = Py_None, [SLICE_TASK_TYPE] = blank,
                [SLICE_FLOWS_OUT] = empty, [SLICE_FLOWS_IN] = empty};
            for (int k = 0; k < SLICE_FIELDS; k++) {  /* start and dur are new, the others borrowed */
                int owned = k == SLICE_START_NS || k == SLICE_DUR_NS;
                PyTuple_SET_ITEM(made, k, owned ? items[k] : Py_NewRef(items[k]));
            }
            int rc = PyList_Append(out, made);
            Py_DECREF(made);
            if (rc < 0) { PyMem_Free(s.items); goto fail; }
        }
        PyMem_Free(s.items);
    }
    Py_DECREF(empty); Py_DECREF(blank);
    return out;
fail:
    Py_XDECREF(out); Py_XDECREF(empty); Py_XDECREF(blank);
    return NULL;
}

static PyMethodDef methods[] = {
    {"step_intervals", (PyCFunction)(void (*)(void))step_intervals, METH_FASTCALL,
     "step_intervals(slices, stream, op, task, is_compute) -> (compute, ops, tasks, ops_seen), each a union"},
    {"lanes", (PyCFunction)(void (*)(void))lanes, METH_FASTCALL,
     "lanes(computing, communication, span) -> (not_overlapped, free)"},
    {"slices", (PyCFunction)(void (*)(void))slices, METH_FASTCALL,
     "slices(lanes, rank, layer, Slice) -> the Slices of each lane's intervals"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_overlap", .m_doc = "The overlap analysis' per-slice work.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__overlap(void) {
    if (!(COMPUTE_TYPES = PyDict_New())) return NULL;
    return PyModule_Create(&module);
}
