/* The database form's per-slice work in C (readers/ascend_db.py), beside the Python rules it follows:
 * - ascend_db._Flows.bind_rules: a step's host-to-device arrows (bind).
 *
 * A detail step of the database form has one arrow per device task (a CANN launch to each task of
 * its connectionId, a PyTorch op to the tasks CONNECTION_IDS lists for it): looking up every
 * slice's connection id and rebuilding the ends cost ~0.6 s per rank of 80,000 tasks in Python,
 * a quarter of the conversion. The rules stay those of the Python reference, which the tests
 * compare this with (tests/test_ascend_db_core.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../records.h"

/* What one bind works with */
typedef struct {
    PyObject *slices, *flow_id, *rank;
    PyObject **outs, **ins;  /* per slice: the flow ids out of it, into it (tuples), or NULL */
    Py_ssize_t backwards;
} Bind;

/* A slice rebuilt with its arrows: tuple.__new__(Slice, (*s[:SLICE_FLOWS_OUT], outs, ins)) */
static PyObject *with_flows(PyObject *s, PyObject *outs, PyObject *ins) {
    PyTypeObject *type = Py_TYPE(s);
    PyObject *made = type->tp_alloc(type, SLICE_FIELDS);
    if (!made) return NULL;
    for (Py_ssize_t i = 0; i < SLICE_FLOWS_OUT; i++) {
        PyObject *item = PyTuple_GET_ITEM(s, i);
        Py_INCREF(item);
        PyTuple_SET_ITEM(made, i, item);
    }
    Py_INCREF(outs); PyTuple_SET_ITEM(made, SLICE_FLOWS_OUT, outs);
    Py_INCREF(ins); PyTuple_SET_ITEM(made, SLICE_FLOWS_IN, ins);
    return made;
}

/* *ends + flows (a tuple; *ends one too, or NULL for none) */
static int add_flows(PyObject **ends, PyObject *flows) {
    PyObject *grown = *ends ? PySequence_Concat(*ends, flows) : (Py_INCREF(flows), flows);
    if (!grown) return -1;
    Py_XSETREF(*ends, grown);
    return 0;
}

static int layer_in(PyObject *layer, PyObject *layers) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(layers); i++)
        if (PyTuple_GET_ITEM(layers, i) == layer) return 1;
    return 0;
}

/* One launch's arrows: to each of its ``ends`` (an index, or a list of them) on ``layers``, the k-th
 * numbered k, none backwards in time (ascend_db._Flows._arrows) */
static int launch_arrows(Bind *b, Py_ssize_t first, PyObject *link, PyObject *ends, const char *kind,
                         PyObject *layers) {
    PyObject *start = PyTuple_GET_ITEM(PyList_GET_ITEM(b->slices, first), SLICE_START_NS);
    PyObject *key = PyUnicode_FromFormat("%S|%s:%S|", b->rank, kind, link);
    if (!key) return -1;
    PyObject *flows = PyList_New(0);  /* the launch's, added at once (a launch may have thousands) */
    int many = PyList_CheckExact(ends), rc = -1;
    if (!flows) goto done;
    for (Py_ssize_t k = 0; k < (many ? PyList_GET_SIZE(ends) : 1); k++) {
        Py_ssize_t last = PyLong_AsSsize_t(many ? PyList_GET_ITEM(ends, k) : ends);
        if (last == -1 && PyErr_Occurred()) goto done;
        PyObject *target = PyList_GET_ITEM(b->slices, last);
        if (!layer_in(PyTuple_GET_ITEM(target, SLICE_LAYER), layers)) continue;
        int backwards = PyObject_RichCompareBool(PyTuple_GET_ITEM(target, SLICE_START_NS), start, Py_LT);
        if (backwards < 0) goto done;
        if (backwards) {  /* clock skew: Perfetto drops it */
            b->backwards++;
            continue;
        }
        PyObject *text = PyUnicode_FromFormat("%U%zd", key, k);
        if (!text) goto done;
        PyObject *flow = PyObject_CallOneArg(b->flow_id, text), *one = flow ? PyTuple_Pack(1, flow) : NULL;
        Py_DECREF(text);
        int failed = !one || add_flows(&b->ins[last], one) < 0 || PyList_Append(flows, flow) < 0;
        Py_XDECREF(flow); Py_XDECREF(one);
        if (failed) goto done;
    }
    PyObject *out = PyList_GET_SIZE(flows) ? PyList_AsTuple(flows) : NULL;
    rc = out ? add_flows(&b->outs[first], out) : 0;
    Py_XDECREF(out);
    if (PyErr_Occurred()) rc = -1;
done:
    Py_DECREF(key);
    Py_XDECREF(flows);
    return rc;
}

/* The arrows of one kind: from each launch (a dict link -> index, in its order) to the targets of its
 * link (a dict link -> index or list of them) */
static int arrows(Bind *b, PyObject *launches, PyObject *targets, const char *kind, PyObject *layers) {
    PyObject *link, *first;
    Py_ssize_t pos = 0;
    while (PyDict_Next(launches, &pos, &link, &first)) {
        PyObject *ends = PyDict_GetItemWithError(targets, link);
        if (!ends) {
            if (PyErr_Occurred()) return -1;
            continue;
        }
        Py_ssize_t i = PyLong_AsSsize_t(first);
        if (i == -1 && PyErr_Occurred()) return -1;
        if (launch_arrows(b, i, link, ends, kind, layers) < 0) return -1;
    }
    return 0;
}

/* targets[link] = i, or [first, i], or its list + [i] */
static int add_target(PyObject *targets, PyObject *link, PyObject *index) {
    PyObject *ends = PyDict_GetItemWithError(targets, link);
    if (!ends) return PyErr_Occurred() ? -1 : PyDict_SetItem(targets, link, index);
    if (PyList_CheckExact(ends)) return PyList_Append(ends, index);
    PyObject *both = PyList_New(2);
    if (!both) return -1;
    Py_INCREF(ends); PyList_SET_ITEM(both, 0, ends);
    Py_INCREF(index); PyList_SET_ITEM(both, 1, index);
    int rc = PyDict_SetItem(targets, link, both);
    Py_DECREF(both);
    return rc;
}

/* ops[int(id)] = index for each id of a PyTorch op's comma-separated device connection ids */
static int add_ops(PyObject *ops, PyObject *found, PyObject *index) {
    static PyObject *comma;
    if (!comma && !(comma = PyUnicode_InternFromString(","))) return -1;
    PyObject *parts = PyUnicode_Split(found, comma, -1);
    if (!parts) return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(parts); i++) {
        PyObject *id = PyNumber_Long(PyList_GET_ITEM(parts, i));
        rc = id ? PyDict_SetItem(ops, id, index) : -1;
        Py_XDECREF(id);
    }
    Py_DECREF(parts);
    return rc;
}

/* Which slices launch and which are launched: ascend_db._Flows.bind_rules' first loop */
static int collect(PyObject *slices, PyObject *links, PyObject *const *layer, PyObject *launches,
                   PyObject *ops, PyObject *targets) {
    static PyObject *connection_id, *cann, *pytorch;
    if (!connection_id && !(connection_id = PyUnicode_InternFromString("connection_id"))) return -1;
    if (!cann && !(cann = PyUnicode_InternFromString("CANN"))) return -1;
    if (!pytorch && !(pytorch = PyUnicode_InternFromString("PyTorch"))) return -1;
    PyObject *host = layer[0];
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(slices); i++) {
        PyObject *s = PyList_GET_ITEM(slices, i), *args = PyTuple_GET_ITEM(s, SLICE_ARGS);
        if (!PyDict_CheckExact(args)) continue;
        PyObject *link = PyDict_GetItemWithError(args, connection_id);
        if (!link) {
            if (PyErr_Occurred()) return -1;
            continue;
        }
        if (link == Py_None) continue;
        PyObject *kind = PyTuple_GET_ITEM(s, SLICE_LAYER), *lane = PyTuple_GET_ITEM(s, SLICE_LANE);
        PyObject *index = PyLong_FromSsize_t(i);
        if (!index) return -1;
        int rc = 0;
        if (kind == host) {
            if (PyUnicode_Tailmatch(lane, cann, 0, PY_SSIZE_T_MAX, -1) == 1) {
                rc = PyDict_SetItem(launches, link, index);
            } else if (PyUnicode_Tailmatch(lane, pytorch, 0, PY_SSIZE_T_MAX, -1) == 1) {
                PyObject *found = PyDict_GetItemWithError(links, link);
                if (found && found != Py_None) {
                    Py_INCREF(found);
                    rc = PyDict_DelItem(links, link) < 0 || add_ops(ops, found, index) < 0 ? -1 : 0;
                    Py_DECREF(found);
                } else if (found) {
                    rc = PyDict_DelItem(links, link);
                } else if (PyErr_Occurred()) {
                    rc = -1;
                }
            }
            if (rc == 0 && PyErr_Occurred()) rc = -1;  /* a lane that is no str */
        } else if (kind == layer[1] || kind == layer[2] || kind == layer[3]) {
            rc = add_target(targets, link, index);
        }
        Py_DECREF(index);
        if (rc < 0) return -1;
    }
    return 0;
}

/* bind(slices, links, rank, flow_id, (HOST, STREAM, COMM_TASK, COMM_OP)) -> the arrows left out as
 * backwards: ascend_db._Flows.bind_rules, the slices rebuilt in place. */
static PyObject *bind(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 5 || !PyList_CheckExact(argv[0]) || !PyDict_CheckExact(argv[1]) || !PyTuple_Check(argv[4]) ||
        PyTuple_GET_SIZE(argv[4]) != 4) {
        PyErr_SetString(PyExc_TypeError, "bind(slices: list, links: dict, rank, flow_id, layers: 4-tuple)");
        return NULL;
    }
    PyObject *slices = argv[0], *layers = argv[4];
    Py_ssize_t n = PyList_GET_SIZE(slices);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyList_GET_ITEM(slices, i);
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) != SLICE_FIELDS) {
            PyErr_SetString(PyExc_TypeError, "bind: expected Slices");
            return NULL;
        }
    }
    Bind b = {slices, argv[3], argv[2], NULL, NULL, 0};
    PyObject *launches = PyDict_New(), *ops = PyDict_New(), *targets = PyDict_New(), *result = NULL;
    PyObject *device = PyTuple_GetSlice(layers, 1, 4), *async_layers = PyTuple_Pack(2, PyTuple_GET_ITEM(layers, 1),
                                                                                     PyTuple_GET_ITEM(layers, 3));
    b.outs = PyMem_Calloc(n ? n : 1, sizeof(PyObject *));
    b.ins = PyMem_Calloc(n ? n : 1, sizeof(PyObject *));
    if (!launches || !ops || !targets || !device || !async_layers || !b.outs || !b.ins) goto done;
    if (collect(slices, argv[1], &PyTuple_GET_ITEM(layers, 0), launches, ops, targets) < 0 ||
        arrows(&b, launches, targets, "HostToDevice", device) < 0 ||
        arrows(&b, ops, targets, "async_npu", async_layers) < 0)
        goto done;
    PyObject *none = PyTuple_New(0);
    if (!none) goto done;
    int failed = 0;
    for (Py_ssize_t pass = 0; pass < 2 && !failed; pass++) {  /* arrows out, then in, as the rules do */
        for (Py_ssize_t i = 0; i < n && !failed; i++) {
            PyObject *flows = pass ? b.ins[i] : b.outs[i];
            if (!flows) continue;
            PyObject *made = pass ? with_flows(PyList_GET_ITEM(slices, i), none, flows)
                                  : with_flows(PyList_GET_ITEM(slices, i), flows, none);
            failed = !made || PyList_SetItem(slices, i, made) < 0;
        }
    }
    Py_DECREF(none);
    if (!failed) result = PyLong_FromSsize_t(b.backwards);
done:
    if (b.outs && b.ins)
        for (Py_ssize_t i = 0; i < n; i++) { Py_XDECREF(b.outs[i]); Py_XDECREF(b.ins[i]); }
    PyMem_Free(b.outs); PyMem_Free(b.ins);
    Py_XDECREF(launches); Py_XDECREF(ops); Py_XDECREF(targets); Py_XDECREF(device); Py_XDECREF(async_layers);
    return result;
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(slices, links, rank, flow_id, (HOST, STREAM, COMM_TASK, COMM_OP)) -> arrows left out as "
     "backwards: a step's host-to-device arrows, the slices rebuilt in place"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_db_core", .m_doc = "The database form's per-slice work.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__db_core(void) { return PyModule_Create(&module); }
