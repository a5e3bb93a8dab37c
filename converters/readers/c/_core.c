/* converters.readers._core: the readers' per-event work in C, one file per Python module it speeds
 * up (core.h lists them). A reader of a big file files every record it makes under its step on disk
 * and reads it back when the step is written; the common events of a batch are read into records
 * in C. This file is the module: the strings the others compare with, interned once, the NamedTuple
 * maker they share, and the functions each file adds. */
#include "core.h"

PyObject *S_ph, *S_name, *S_pid, *S_tid, *S_ts, *S_dur, *S_cat, *S_id, *S_args;
PyObject *S_M, *S_X, *S_C, *S_s, *S_f, *S_t, *S_HOST, *S_STREAM, *S_STEP_PREFIX;
PyObject *S_ITERATION, *S_REDUCE, *S_PROFILE_STEP, *EMPTY, *EMPTY_TUPLE;

PyObject *record(PyObject *type, PyObject **items, Py_ssize_t n) {
    PyObject *made = NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!items[i]) goto done;
    if (!(made = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, n))) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTuple_SET_ITEM(made, i, items[i]);
        items[i] = NULL;
    }
done:
    for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(items[i]);
    return made;
}

static int intern_all(void) {
    struct { PyObject **slot; const char *text; } names[] = {
        {&S_ph, "ph"}, {&S_name, "name"}, {&S_pid, "pid"}, {&S_tid, "tid"}, {&S_ts, "ts"}, {&S_dur, "dur"},
        {&S_cat, "cat"}, {&S_id, "id"}, {&S_args, "args"}, {&S_M, "M"}, {&S_X, "X"}, {&S_C, "C"}, {&S_s, "s"},
        {&S_f, "f"}, {&S_t, "t"}, {&S_HOST, "HOST"}, {&S_STREAM, "STREAM"}, {&S_STEP_PREFIX, "ProfilerStep#"},
        {&EMPTY, ""}, {&S_ITERATION, "Iteration Time"}, {&S_REDUCE, "Reduce"}, {&S_PROFILE_STEP, "ProfileStep"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!(*names[i].slot = PyUnicode_InternFromString(names[i].text))) return -1;
    return (EMPTY_TUPLE = PyTuple_New(0)) ? 0 : -1;
}

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_core", .m_doc = "The readers' per-event helpers.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__core(void) {
    if (intern_all() < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    PyMethodDef *const parts[] = {SEEK_METHODS, FLOWS_METHODS, CHROME_TRACE_METHODS, EVENTS_METHODS, SPILL_METHODS,
                                  SURVEY_METHODS, PADDLE_METHODS, XPLANE_METHODS};
    for (size_t i = 0; m && i < sizeof parts / sizeof parts[0]; i++)
        if (PyModule_AddFunctions(m, parts[i]) < 0) Py_CLEAR(m);
    if (m && (events_ready(m) < 0 || seek_ready(m) < 0 || xplane_ready(m) < 0)) Py_CLEAR(m);
    return m;
}
