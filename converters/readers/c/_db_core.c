/* converters.readers._db_core: the database form's per-record work in C (readers/ascend_db.py), one
 * file per Python module it speeds up (db_core.h lists them). A rank of 80,000 device tasks has as
 * many host launches and arrows: made one record at a time in Python (a dict and a call per row, a
 * heap step per record, a lookup and a rebuild per arrow) they were most of a detail conversion
 * (BENCHMARKS.md, issue 28, round three). This file is the module and the slice makers the others
 * share. */
#include "db_core.h"

/* Leave a Slice whose args hold no container (a dict of numbers and strings, the collector leaves
 * it alone too) to the collector's care no more: nothing it holds can lead back to it, so it is in
 * no reference cycle, and a rank's 160,000 slices walked by every collection cost a tenth of a
 * conversion (BENCHMARKS.md, issue 28, round three). */
void untrack(PyObject *s) {
    PyObject *args = PyTuple_GET_ITEM(s, SLICE_ARGS);
    if (!PyObject_IS_GC(args) || !PyObject_GC_IsTracked(args)) PyObject_GC_UnTrack(s);
}

/* A Slice of ``type``: tuple.__new__(type, (rank, layer, lane, name, start, dur, args, task_type, (), ())),
 * the references to ``start``, ``dur`` and ``args`` taken over (NULL: an error already set) */
PyObject *new_slice(PyTypeObject *type, PyObject *rank, PyObject *layer, PyObject *lane, PyObject *name,
                           PyObject *start, PyObject *dur, PyObject *args, PyObject *task_type) {
    PyObject *made = start && dur && args ? type->tp_alloc(type, SLICE_FIELDS) : NULL;
    if (!made) {
        Py_XDECREF(start); Py_XDECREF(dur); Py_XDECREF(args);
        return NULL;
    }
    PyObject *none = PyTuple_New(0);  /* the empty tuple is a singleton: never fails */
    PyObject *items[SLICE_FIELDS] = {rank, layer, lane, name, start, dur, args, task_type, none, none};
    for (Py_ssize_t i = 0; i < SLICE_FIELDS; i++) {
        if (i != SLICE_START_NS && i != SLICE_DUR_NS && i != SLICE_ARGS) Py_INCREF(items[i]);
        PyTuple_SET_ITEM(made, i, items[i]);
    }
    Py_DECREF(none);
    untrack(made);
    return made;
}
/* out.append(made), ``made`` a new reference (NULL: an error already raised), released: 0, or -1 */
int append_made(PyObject *out, PyObject *made) {
    int rc = made ? PyList_Append(out, made) : -1;
    Py_XDECREF(made);
    return rc;
}

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_db_core", .m_doc = "The database form's per-slice work.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__db_core(void) {
    PyObject *m = PyModule_Create(&module);
    PyMethodDef *const parts[] = {FLOWS_METHODS, ROWS_METHODS, STEPS_METHODS};
    for (size_t i = 0; m && i < sizeof parts / sizeof parts[0]; i++)
        if (PyModule_AddFunctions(m, parts[i]) < 0) Py_CLEAR(m);
    if (m && rows_ready(m) < 0) Py_CLEAR(m);
    return m;
}
