/* The readers' per-event helpers in C: times in µs to ns (chrome_trace.us_to_ns), and records
 * to plain rows and back for the step spill (readers/spill.py).
 *
 * A reader of a big file files every record it makes under its step on disk and reads it back
 * when the step is written: two conversions per record, about 2 us each in Python, a fifth of a
 * detail conversion. A row is a plain tuple that marshal can write: the record's kind first
 * (its layer's order for a Slice, -1 for a Sample, -2 for a FlowEnd), the rank left out (the
 * reader knows it), raw JSON args as bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

#define SAMPLE (-1)
#define FLOW_END (-2)

static PyObject *layer_order(PyObject *orders, PyObject *layer) {
    PyObject *order = PyDict_GetItemWithError(orders, layer);
    if (!order && !PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "no layer %R", layer);
    return order;  /* borrowed */
}

/* (kind, fields[from:]...), with field ``args_at`` as bytes if it is neither None nor a dict */
static PyObject *row_of(PyObject *kind, PyObject *r, Py_ssize_t from, Py_ssize_t args_at) {
    Py_ssize_t n = PyTuple_GET_SIZE(r);
    PyObject *row = PyTuple_New(1 + n - from);
    if (!row) return NULL;
    Py_INCREF(kind);
    PyTuple_SET_ITEM(row, 0, kind);
    for (Py_ssize_t i = from; i < n; i++) {
        PyObject *value = PyTuple_GET_ITEM(r, i);
        if (i == args_at && value != Py_None && !PyDict_CheckExact(value) && !PyBytes_CheckExact(value)) {
            value = PyObject_Bytes(value);  /* msgspec.Raw: pickled or marshalled only as bytes */
            if (!value) { Py_DECREF(row); return NULL; }
        } else {
            Py_INCREF(value);
        }
        PyTuple_SET_ITEM(row, 1 + i - from, value);
    }
    return row;
}

static PyObject *rows(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 5) {
        PyErr_SetString(PyExc_TypeError, "rows(records, orders, Slice, Sample, FlowEnd)");
        return NULL;
    }
    PyObject *records = PySequence_Fast(argv[0], "records must be a sequence"), *orders = argv[1];
    if (!records) return NULL;
    PyObject *sample = PyLong_FromLong(SAMPLE), *flow_end = PyLong_FromLong(FLOW_END);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(records);
    PyObject *out = (sample && flow_end) ? PyList_New(n) : NULL;
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *r = PySequence_Fast_GET_ITEM(records, i), *row = NULL, *order;
        PyTypeObject *type = Py_TYPE(r);
        if (type == (PyTypeObject *)argv[2] && PyTuple_GET_SIZE(r) == 10) {  /* Slice */
            if ((order = layer_order(orders, PyTuple_GET_ITEM(r, 1)))) row = row_of(order, r, 2, 6);
        } else if (type == (PyTypeObject *)argv[3] && PyTuple_GET_SIZE(r) == 4) {  /* Sample */
            row = row_of(sample, r, 1, -1);
        } else if (type == (PyTypeObject *)argv[4] && PyTuple_GET_SIZE(r) == 6) {  /* FlowEnd */
            if ((order = layer_order(orders, PyTuple_GET_ITEM(r, 1)))) {
                row = row_of(flow_end, r, 1, -1);
                if (row) {  /* the layer as its order */
                    Py_INCREF(order);
                    Py_SETREF(PyTuple_GET_ITEM(row, 1), order);
                }
            }
        } else {
            PyErr_Format(PyExc_TypeError, "not a record: %R", r);
        }
        if (!row) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, row);
    }
    Py_XDECREF(sample); Py_XDECREF(flow_end);
    Py_DECREF(records);
    return out;
}

/* type(rank, layer?, *row[skip:]) for a tuple subclass, made as its tp_new would but without
 * the NamedTuple's Python __new__ */
static PyObject *record_of(PyObject *type, PyObject *rank, PyObject *layer, PyObject *row, Py_ssize_t skip) {
    Py_ssize_t n = PyTuple_GET_SIZE(row), head = layer ? 2 : 1;
    PyObject *record = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, head + n - skip);
    if (!record) return NULL;
    Py_INCREF(rank);
    PyTuple_SET_ITEM(record, 0, rank);
    if (layer) { Py_INCREF(layer); PyTuple_SET_ITEM(record, 1, layer); }
    for (Py_ssize_t i = skip; i < n; i++) {
        Py_INCREF(PyTuple_GET_ITEM(row, i));
        PyTuple_SET_ITEM(record, head + i - skip, PyTuple_GET_ITEM(row, i));
    }
    return record;
}

static PyObject *records(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 6) {
        PyErr_SetString(PyExc_TypeError, "records(rows, rank, layers, Slice, Sample, FlowEnd)");
        return NULL;
    }
    PyObject *rows = PySequence_Fast(argv[0], "rows must be a sequence"), *rank = argv[1], *layers = argv[2];
    if (!rows) return NULL;
    if (!PyList_CheckExact(layers)) {
        Py_DECREF(rows);
        PyErr_SetString(PyExc_TypeError, "layers must be a list");
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rows);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *row = PySequence_Fast_GET_ITEM(rows, i), *record = NULL;
        long kind = -3;
        if (PyTuple_CheckExact(row) && PyTuple_GET_SIZE(row) > 1) kind = PyLong_AsLong(PyTuple_GET_ITEM(row, 0));
        if (kind == -1 && PyErr_Occurred()) { Py_CLEAR(out); break; }
        if (kind >= 0 && kind < PyList_GET_SIZE(layers)) {
            record = record_of(argv[3], rank, PyList_GET_ITEM(layers, kind), row, 1);
        } else if (kind == SAMPLE) {
            record = record_of(argv[4], rank, NULL, row, 1);
        } else if (kind == FLOW_END) {
            long layer = PyLong_AsLong(PyTuple_GET_ITEM(row, 1));
            if (layer >= 0 && layer < PyList_GET_SIZE(layers))
                record = record_of(argv[5], rank, PyList_GET_ITEM(layers, layer), row, 2);
            else if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "bad layer in a spill row");
        } else {
            PyErr_SetString(PyExc_ValueError, "bad spill row");
        }
        if (!record) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, record);
    }
    Py_DECREF(rows);
    return out;
}

/* µs as profilers write them, as ns: a number (``round(us * 1000)``, exact below 9e12 µs), or a
 * string of ASCII digits with at most 3 decimals, parsed exactly. Anything else (more decimals,
 * an exponent, huge values, bad input) is ``exact(us)``'s, the Python rules this follows. */
static PyObject *us_to_ns(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 2) {
        PyErr_SetString(PyExc_TypeError, "us_to_ns(us, exact)");
        return NULL;
    }
    PyObject *us = argv[0];
    if (PyUnicode_CheckExact(us) && PyUnicode_IS_ASCII(us)) {
        const char *text = (const char *)PyUnicode_DATA(us);
        Py_ssize_t n = PyUnicode_GET_LENGTH(us), i = 0;
        long long whole = 0, fraction = 0;
        int decimals = 0;
        while (i < n && text[i] >= '0' && text[i] <= '9' && i < 16) whole = whole * 10 + (text[i++] - '0');
        if (i > 0 && whole < 9000000000000000LL && (i == n || text[i] == '.')) {  /* x1000 fits */
            Py_ssize_t digits_end = i;
            if (i < n) {
                for (i++; i < n && decimals < 3 && text[i] >= '0' && text[i] <= '9'; i++, decimals++)
                    fraction = fraction * 10 + (text[i] - '0');
            }
            if (i == n && (digits_end == n || decimals > 0 || digits_end + 1 == n)) {
                while (decimals++ < 3) fraction *= 10;
                return PyLong_FromLongLong(whole * 1000 + fraction);
            }
        }
    } else if (PyFloat_CheckExact(us)) {
        double value = PyFloat_AS_DOUBLE(us);
        if (value > -9e12 && value < 9e12) return PyLong_FromDouble(nearbyint(value * 1000.0));
    } else if (PyLong_CheckExact(us)) {
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(us, &overflow);
        if (value == -1 && PyErr_Occurred()) return NULL;
        if (!overflow && value > -9000000000000LL && value < 9000000000000LL) return PyLong_FromLongLong(value * 1000);
    }
    return PyObject_CallOneArg(argv[1], us);
}

static PyMethodDef methods[] = {
    {"us_to_ns", (PyCFunction)(void (*)(void))us_to_ns, METH_FASTCALL,
     "us_to_ns(us, exact) -> int: µs (a number, or a string with at most 3 decimals) as ns"},
    {"rows", (PyCFunction)(void (*)(void))rows, METH_FASTCALL,
     "rows(records, orders, Slice, Sample, FlowEnd) -> list of plain tuples"},
    {"records", (PyCFunction)(void (*)(void))records, METH_FASTCALL,
     "records(rows, rank, layers, Slice, Sample, FlowEnd) -> the records again"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_core", .m_doc = "The readers' per-event helpers.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&module); }
