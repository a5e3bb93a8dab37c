/* ascend_db._by_step in C: the scans merged by time (as heapq.merge) and filed under their steps
 * (fill). tests/readers/test_ascend_db_core.py holds it to heapq.merge and the filing. */
#include "db_core.h"

#include <limits.h>

/* -- the scans merged and filed by step --------------------------------------------------------- */

typedef struct {
    PyObject *head;    /* [iterator of batches, batch, position] (borrowed from ``heads``) */
    Py_ssize_t pos;
    long long start;   /* of batch[pos] */
    int alive;
} Head;

/* head's batch[pos]'s start_ns: a Slice's or a Sample's */
static int start_of(Head *h, PyTypeObject *slice_type, PyTypeObject *sample_type) {
    PyObject *r = PyList_GET_ITEM(PyList_GET_ITEM(h->head, FILL_HEAD_BATCH), h->pos), *start;
    if (Py_IS_TYPE(r, slice_type)) start = PyTuple_GET_ITEM(r, SLICE_START_NS);
    else if (Py_IS_TYPE(r, sample_type)) start = PyTuple_GET_ITEM(r, SAMPLE_START_NS);
    else {
        PyErr_Format(PyExc_TypeError, "fill: a scan gave no Slice or Sample: %R", r);
        return -1;
    }
    int overflow = 0;
    h->start = PyLong_AsLongLongAndOverflow(start, &overflow);
    if (overflow) PyErr_SetString(PyExc_OverflowError, "fill: a time past 2**63 ns");
    return overflow || (h->start == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* The head on its next record, taking the iterator's next non-empty batch where the batch ends */
static int advance(Head *h, PyTypeObject *slice_type, PyTypeObject *sample_type) {
    h->pos++;
    while (h->pos >= PyList_GET_SIZE(PyList_GET_ITEM(h->head, FILL_HEAD_BATCH))) {
        PyObject *batch = PyIter_Next(PyList_GET_ITEM(h->head, FILL_HEAD_BATCHES));
        if (!batch) {
            h->alive = 0;
            return PyErr_Occurred() ? -1 : 0;
        }
        if (!PyList_CheckExact(batch)) {
            Py_DECREF(batch);
            PyErr_SetString(PyExc_TypeError, "fill: a scan gave a batch that is no list");
            return -1;
        }
        PyList_SetItem(h->head, FILL_HEAD_BATCH, batch);  /* takes it: the old batch is done */
        h->pos = 0;
    }
    return start_of(h, slice_type, sample_type);
}

/* fill(heads, next_start, slices, samples, Slice, Sample): the scans' records that start before
 * next_start, in time order (ties: the earlier scan's first, as heapq.merge gives them), appended to
 * ``slices`` and ``samples``; each head a list [iterator of batches (lists of records in time
 * order), the batch read, the position in it]: an ascend_db_specs.FillHead's items (ascend_db._by_step;
 * the rule: ascend_db.by_step_rules). */
static PyObject *fill(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 6 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[2]) || !PyList_CheckExact(argv[3]) ||
        !PyType_Check(argv[4]) || !PyType_Check(argv[5])) {
        PyErr_SetString(PyExc_TypeError, "fill(heads, next_start, slices, samples, Slice, Sample)");
        return NULL;
    }
    PyObject *heads = argv[0], *slices = argv[2], *samples = argv[3];
    PyTypeObject *slice_type = (PyTypeObject *)argv[4], *sample_type = (PyTypeObject *)argv[5];
    int overflow = 0;
    long long next_start = PyLong_AsLongLongAndOverflow(argv[1], &overflow);
    if (overflow) next_start = overflow > 0 ? LLONG_MAX : LLONG_MIN;
    else if (next_start == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(heads), i;
    Head *h = PyMem_Calloc(n ? n : 1, sizeof(Head));
    if (!h) return PyErr_NoMemory();
    int rc = 0;
    for (i = 0; i < n && rc == 0; i++) {
        PyObject *head = PyList_GET_ITEM(heads, i);
        if (!PyList_CheckExact(head) || PyList_GET_SIZE(head) != FILL_HEAD_FIELDS ||
            !PyList_CheckExact(PyList_GET_ITEM(head, FILL_HEAD_BATCH))) {
            PyErr_SetString(PyExc_TypeError, "fill: a head is [iterator, batch, position]");
            rc = -1;
            break;
        }
        h[i].head = head;
        h[i].alive = 1;
        h[i].pos = PyLong_AsSsize_t(PyList_GET_ITEM(head, FILL_HEAD_POSITION)) - 1;
        rc = h[i].pos < -1 ? -1 : advance(&h[i], slice_type, sample_type);
    }
    while (rc == 0) {
        Head *first = NULL;
        for (i = 0; i < n; i++)
            if (h[i].alive && (!first || h[i].start < first->start)) first = &h[i];
        if (!first || first->start >= next_start) break;
        PyObject *r = PyList_GET_ITEM(PyList_GET_ITEM(first->head, FILL_HEAD_BATCH), first->pos);
        rc = PyList_Append(Py_IS_TYPE(r, slice_type) ? slices : samples, r);
        if (rc == 0) rc = advance(first, slice_type, sample_type);
    }
    for (i = 0; i < n && h[i].head; i++) {  /* where each head stands */
        PyObject *pos = PyLong_FromSsize_t(h[i].pos);
        if (!pos || PyList_SetItem(h[i].head, FILL_HEAD_POSITION, pos) < 0) rc = -1;
    }
    PyMem_Free(h);
    if (rc < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "fill: a head's position is negative");
        return NULL;
    }
    Py_RETURN_NONE;
}

PyMethodDef STEPS_METHODS[] = {
    {"fill", (PyCFunction)(void (*)(void))fill, METH_FASTCALL,
     "fill(heads, next_start, slices, samples, Slice, Sample): the scans' records before next_start, "
     "merged by time"},
    {NULL, NULL, 0, NULL},
};
