/* The per-slice part of pipeline.step_overlap, in C: it runs once per slice of every step, in
 * summary too, where it was a third of the Python left (CANN 7/8 layouts).
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

static int span_order(const void *a, const void *b) {
    const Span *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* overlap.union of the spans, as a list of (start, end) tuples */
static PyObject *union_of(Spans *s) {
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
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
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

static PyObject *step_intervals(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 5 || !PyList_CheckExact(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "step_intervals(slices: list, stream, op, task, is_compute)");
        return NULL;
    }
    PyObject *slices = argv[0], *result = NULL, *lists[3] = {NULL, NULL, NULL};
    Spans spans[3] = {{0}};  /* compute, ops, tasks */
    int ops_seen = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(slices); i++) {
        PyObject *s = PyList_GET_ITEM(slices, i);
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) < 8) { PyErr_SetString(PyExc_TypeError, "not a Slice"); goto done; }
        PyObject *layer = PyTuple_GET_ITEM(s, 1);
        int which = layer == argv[1] ? 0 : layer == argv[2] ? 1 : layer == argv[3] ? 2 : -1;
        if (which < 0) continue;
        if (which == 0) {
            int yes = compute_type(PyTuple_GET_ITEM(s, 7), argv[4]);
            if (yes < 0) goto done;
            if (!yes) continue;
        }
        ops_seen |= which == 1;
        int overflow = 0;
        long long start = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(s, 4), &overflow), dur = 0;
        if (!overflow && !PyErr_Occurred()) dur = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(s, 5), &overflow);
        if (!overflow && !PyErr_Occurred() && ((dur > 0 && start > LLONG_MAX - dur) || (dur < 0 && start < LLONG_MIN - dur)))
            overflow = 1;
        if (overflow) PyErr_SetString(PyExc_OverflowError, "a slice past 2**63 ns");
        if (PyErr_Occurred() || spans_add(&spans[which], start, start + dur) < 0) goto done;
    }
    for (int k = 0; k < 3; k++)
        if (!(lists[k] = union_of(&spans[k]))) goto done;
    result = Py_BuildValue("(OOOO)", lists[0], lists[1], lists[2], ops_seen ? Py_True : Py_False);
done:
    for (int k = 0; k < 3; k++) { PyMem_Free(spans[k].items); Py_XDECREF(lists[k]); }
    return result;
}

static PyMethodDef methods[] = {
    {"step_intervals", (PyCFunction)(void (*)(void))step_intervals, METH_FASTCALL,
     "step_intervals(slices, stream, op, task, is_compute) -> (compute, ops, tasks, ops_seen), each a union"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_overlap", .m_doc = "The per-slice part of the overlap analysis.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__overlap(void) {
    if (!(COMPUTE_TYPES = PyDict_New())) return NULL;
    return PyModule_Create(&module);
}
