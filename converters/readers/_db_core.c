/* The database form's per-record work in C (readers/ascend_db.py), beside the Python rules it follows:
 * - ascend_db._Flows.bind_rules: the arrows a step starts, into it and the next step (bind);
 * - ascend_db._Reader._task_rules, _host_slice: the TASK and host API rows SQLite says are as
 *   expected made into their slices (task_slices, host_slices), until a row the rules must read;
 * - heapq.merge and the loop that filed its stream by step: the scans merged by time and filed
 *   under their steps (fill, for ascend_db._by_step).
 *
 * A rank of 80,000 device tasks has as many host launches and arrows: made one record at a time in
 * Python (a dict and a call per row, a heap step per record, a lookup and a rebuild per arrow) they
 * were most of a detail conversion (BENCHMARKS.md, issue 28, round three). tests/readers/
 * test_ascend_db_core.py pins each function here to the Python it follows.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>

#include "../records.h"

/* Leave a Slice whose args hold no container (a dict of numbers and strings, the collector leaves
 * it alone too) to the collector's care no more: nothing it holds can lead back to it, so it is in
 * no reference cycle, and a rank's 160,000 slices walked by every collection cost a tenth of a
 * conversion (BENCHMARKS.md, issue 28, round three). */
static void untrack(PyObject *s) {
    PyObject *args = PyTuple_GET_ITEM(s, SLICE_ARGS);
    if (!PyObject_IS_GC(args) || !PyObject_GC_IsTracked(args)) PyObject_GC_UnTrack(s);
}

/* A Slice of ``type``: tuple.__new__(type, (rank, layer, lane, name, start, dur, args, task_type, (), ())),
 * the references to ``start``, ``dur`` and ``args`` taken over (NULL: an error already set) */
static PyObject *new_slice(PyTypeObject *type, PyObject *rank, PyObject *layer, PyObject *lane, PyObject *name,
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

/* What one bind works with */
typedef struct {
    PyObject *slices, *flow_id, *rank;
    PyObject **outs, **ins;  /* per slice: the flow ids out of it, into it (tuples), or NULL */
    Py_ssize_t backwards, split;  /* arrows start before split; those reaching past it are carried */
    PyObject *carried, *carried_out;  /* kind -> the links drawn into this step before, into the next */
} Bind;

/* *ends + flows (a tuple; *ends one too, or NULL for none) */
static int add_flows(PyObject **ends, PyObject *flows) {
    PyObject *grown = *ends ? PySequence_Concat(*ends, flows) : (Py_INCREF(flows), flows);
    if (!grown) return -1;
    Py_XSETREF(*ends, grown);
    return 0;
}

/* A slice with arrows added: tuple.__new__(Slice, (*s[:SLICE_FLOWS_OUT], s.flows_out + outs,
 * s.flows_in + ins)) (outs and ins NULL for none); the slice itself, changed in place, where the
 * caller holds the only reference to it (no one else can see it change: a conversion's slices are
 * the step's list's alone, and an arrow then costs no copy) */
static PyObject *with_flows(PyObject *s, PyObject *outs, PyObject *ins) {
    PyObject *now_out = PyTuple_GET_ITEM(s, SLICE_FLOWS_OUT), *now_in = PyTuple_GET_ITEM(s, SLICE_FLOWS_IN);
    PyObject *out = now_out, *in = now_in;
    Py_INCREF(out); Py_INCREF(in);
    if ((outs && add_flows(&out, outs) < 0) || (ins && add_flows(&in, ins) < 0)) {
        Py_DECREF(out); Py_DECREF(in);
        return NULL;
    }
    if (Py_REFCNT(s) == 1) {
        Py_SETREF(((PyTupleObject *)s)->ob_item[SLICE_FLOWS_OUT], out);
        Py_SETREF(((PyTupleObject *)s)->ob_item[SLICE_FLOWS_IN], in);
        Py_INCREF(s);
        return s;
    }
    PyTypeObject *type = Py_TYPE(s);
    PyObject *made = type->tp_alloc(type, SLICE_FIELDS);
    if (!made) {
        Py_DECREF(out); Py_DECREF(in);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < SLICE_FLOWS_OUT; i++) {
        PyObject *item = PyTuple_GET_ITEM(s, i);
        Py_INCREF(item);
        PyTuple_SET_ITEM(made, i, item);
    }
    PyTuple_SET_ITEM(made, SLICE_FLOWS_OUT, out);
    PyTuple_SET_ITEM(made, SLICE_FLOWS_IN, in);
    untrack(made);
    return made;
}

/* link added to the set carried_out[kind] */
static int carry(Bind *b, PyObject *kind, PyObject *link) {
    PyObject *links = PyDict_GetItemWithError(b->carried_out, kind);
    if (!links) {
        if (PyErr_Occurred() || !(links = PySet_New(NULL))) return -1;
        int rc = PyDict_SetItem(b->carried_out, kind, links);
        Py_DECREF(links);
        if (rc < 0) return -1;
    }
    return PySet_Add(links, link);
}

/* Whether link is in the set carried[kind]: drawn into this step from the one before */
static int carried(Bind *b, PyObject *kind, PyObject *link) {
    PyObject *links = PyDict_GetItemWithError(b->carried, kind);
    if (!links) return PyErr_Occurred() ? -1 : 0;
    return PySequence_Contains(links, link);
}

static int layer_in(PyObject *layer, PyObject *layers) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(layers); i++)
        if (PyTuple_GET_ITEM(layers, i) == layer) return 1;
    return 0;
}

/* One launch's arrows: to each of its ``ends`` (an index, or a list of them) on ``layers``, the k-th
 * numbered k, none backwards in time; its link carried if one reaches past the split, none drawn if
 * it was carried (ascend_db._Arrows.draw) */
static int launch_arrows(Bind *b, Py_ssize_t first, PyObject *link, PyObject *ends, PyObject *kind,
                         PyObject *layers) {
    int done = carried(b, kind, link);
    if (done) return done < 0 ? -1 : 0;
    PyObject *start = PyTuple_GET_ITEM(PyList_GET_ITEM(b->slices, first), SLICE_START_NS);
    PyObject *key = PyUnicode_FromFormat("%S|%U:%S|", b->rank, kind, link);
    if (!key) return -1;
    PyObject *flows = PyList_New(0);  /* the launch's, added at once (a launch may have thousands) */
    int many = PyList_CheckExact(ends), rc = -1;
    if (!flows) goto done;
    for (Py_ssize_t k = 0; k < (many ? PyList_GET_SIZE(ends) : 1); k++) {
        Py_ssize_t last = PyLong_AsSsize_t(many ? PyList_GET_ITEM(ends, k) : ends);
        if (last == -1 && PyErr_Occurred()) goto done;
        PyObject *target = PyList_GET_ITEM(b->slices, last);
        if (!layer_in(PyTuple_GET_ITEM(target, SLICE_LAYER), layers)) continue;
        if (last >= b->split && carry(b, kind, link) < 0) goto done;
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

/* The last of ``ends`` (an index, or a list of them ascending) before ``split``; -1 for none, -2 for
 * an error (ascend_db._last_before) */
static Py_ssize_t last_before(PyObject *ends, Py_ssize_t split) {
    int many = PyList_CheckExact(ends);
    for (Py_ssize_t k = many ? PyList_GET_SIZE(ends) - 1 : 0; k >= 0; k--) {
        Py_ssize_t i = PyLong_AsSsize_t(many ? PyList_GET_ITEM(ends, k) : ends);
        if (i == -1 && PyErr_Occurred()) return -2;
        if (i < split) return i;
    }
    return -1;
}

/* The arrows of one kind: from each launch (a dict link -> index, or a list of them: from the last
 * before the split) to the targets of its link (a dict link -> index or list of them) */
static int arrows(Bind *b, PyObject *launches, PyObject *targets, PyObject *kind, PyObject *layers) {
    PyObject *link, *first;
    Py_ssize_t pos = 0;
    while (PyDict_Next(launches, &pos, &link, &first)) {
        Py_ssize_t i = last_before(first, b->split);
        if (i == -2) return -1;
        if (i == -1) continue;
        PyObject *ends = PyDict_GetItemWithError(targets, link);
        if (!ends) {
            if (PyErr_Occurred()) return -1;
            continue;
        }
        if (launch_arrows(b, i, link, ends, kind, layers) < 0) return -1;
    }
    return 0;
}

/* The arrows between PyTorch ops of one kind (ascend_db._HOST_LINKS): from the first op of each
 * link (a dict link -> index, or a list of them in order) that ``ops`` lists more than one of, to the
 * later ones, where the link is a task queue's (``queue``: one of its ops named Enqueue... or
 * Dequeue...) or not */
static int host_arrows(Bind *b, PyObject *ops, int queue, PyObject *kind, PyObject *layers) {
    static PyObject *enqueue, *dequeue;
    if (!enqueue && !(enqueue = PyUnicode_InternFromString("Enqueue"))) return -1;
    if (!dequeue && !(dequeue = PyUnicode_InternFromString("Dequeue"))) return -1;
    PyObject *link, *ends;
    Py_ssize_t pos = 0;
    while (PyDict_Next(ops, &pos, &link, &ends)) {
        if (!PyList_CheckExact(ends)) continue;
        Py_ssize_t first = PyLong_AsSsize_t(PyList_GET_ITEM(ends, 0));
        if (first == -1 && PyErr_Occurred()) return -1;
        if (first >= b->split) continue;
        int queued = 0;
        for (Py_ssize_t k = 0; !queued && k < PyList_GET_SIZE(ends); k++) {
            Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(ends, k));
            if (i == -1 && PyErr_Occurred()) return -1;
            PyObject *name = PyTuple_GET_ITEM(PyList_GET_ITEM(b->slices, i), SLICE_NAME);
            if (!PyUnicode_Check(name)) {
                PyErr_SetString(PyExc_TypeError, "bind: a slice's name is no str");
                return -1;
            }
            queued = PyUnicode_Tailmatch(name, enqueue, 0, PY_SSIZE_T_MAX, -1) == 1 ||
                     PyUnicode_Tailmatch(name, dequeue, 0, PY_SSIZE_T_MAX, -1) == 1;
        }
        if (queued != queue) continue;
        PyObject *later = PyList_GetSlice(ends, 1, PyList_GET_SIZE(ends));
        int rc = later ? launch_arrows(b, first, link, later, kind, layers) : -1;
        Py_XDECREF(later);
        if (rc < 0) return -1;
    }
    return 0;
}

/* ends_of[link] = i, or [first, i], or its list + [i]; not i again where it is the last (a PyTorch op
 * listing a connection id twice) */
static int add_end(PyObject *ends_of, PyObject *link, PyObject *index) {
    PyObject *ends = PyDict_GetItemWithError(ends_of, link);
    if (!ends) return PyErr_Occurred() ? -1 : PyDict_SetItem(ends_of, link, index);
    PyObject *last = PyList_CheckExact(ends) ? PyList_GET_ITEM(ends, PyList_GET_SIZE(ends) - 1) : ends;
    int same = PyObject_RichCompareBool(last, index, Py_EQ);
    if (same) return same < 0 ? -1 : 0;
    if (PyList_CheckExact(ends)) return PyList_Append(ends, index);
    PyObject *both = PyList_New(2);
    if (!both) return -1;
    Py_INCREF(ends); PyList_SET_ITEM(both, 0, ends);
    Py_INCREF(index); PyList_SET_ITEM(both, 1, index);
    int rc = PyDict_SetItem(ends_of, link, both);
    Py_DECREF(both);
    return rc;
}

/* add_end(ops, int(id), index) for each id of a PyTorch op's comma-separated connection ids; ``known``:
 * only for the ids ops holds already (the next step's ops: only the links of this step's reach them) */
static int add_ops(PyObject *ops, PyObject *found, PyObject *index, int known) {
    static PyObject *comma;
    if (!comma && !(comma = PyUnicode_InternFromString(","))) return -1;
    PyObject *parts = PyUnicode_Split(found, comma, -1);
    if (!parts) return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(parts); i++) {
        PyObject *id = PyNumber_Long(PyList_GET_ITEM(parts, i));
        int wanted = !id ? -1 : known ? PyDict_Contains(ops, id) : 1;
        rc = wanted < 0 ? -1 : wanted ? add_end(ops, id, index) : 0;
        Py_XDECREF(id);
    }
    Py_DECREF(parts);
    return rc;
}

/* Which slices launch and which are launched: ascend_db._Flows.bind_rules' first loop */
static int collect(PyObject *slices, Py_ssize_t split, PyObject *links, PyObject *const *layer,
                   PyObject *launches, PyObject *ops, PyObject *targets) {
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
        if (i >= split && kind != host) {  /* the next step's: only the targets of this step's starts */
            int wanted = PyDict_Contains(launches, link);
            if (wanted == 0) wanted = PyDict_Contains(ops, link);
            if (wanted <= 0) {
                if (wanted < 0) return -1;
                continue;
            }
        }
        PyObject *index = PyLong_FromSsize_t(i);
        if (!index) return -1;
        int rc = 0;
        if (kind == host) {
            if (PyUnicode_Tailmatch(lane, cann, 0, PY_SSIZE_T_MAX, -1) == 1) {
                rc = i < split ? PyDict_SetItem(launches, link, index) : 0;
            } else if (PyUnicode_Tailmatch(lane, pytorch, 0, PY_SSIZE_T_MAX, -1) == 1) {
                PyObject *found = PyDict_GetItemWithError(links, link);  /* taken by its own step only */
                if (found && found != Py_None) {
                    Py_INCREF(found);
                    rc = (i < split && PyDict_DelItem(links, link) < 0) ||
                         add_ops(ops, found, index, i >= split) < 0 ? -1 : 0;
                    Py_DECREF(found);
                } else if (found) {
                    rc = i < split ? PyDict_DelItem(links, link) : 0;
                } else if (PyErr_Occurred()) {
                    rc = -1;
                }
            }
            if (rc == 0 && PyErr_Occurred()) rc = -1;  /* a lane that is no str */
        } else if (kind == layer[1] || kind == layer[2] || kind == layer[3]) {
            rc = add_end(targets, link, index);
        }
        Py_DECREF(index);
        if (rc < 0) return -1;
    }
    return 0;
}

/* bind(slices, split, links, carried, rank, flow_id, (HOST, STREAM, COMM_TASK, COMM_OP)) -> (the arrows
 * left out as backwards, the links carried into the next step): ascend_db._Flows.bind_rules, the
 * slices rebuilt in place (a slice's arrows out and in added at once). */
static PyObject *bind(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    static PyObject *kinds[4];
    static const char *kind_names[4] = {"HostToDevice", "async_npu", "async_task_queue", "fwdbwd"};
    for (int k = 0; k < 4; k++)
        if (!kinds[k] && !(kinds[k] = PyUnicode_InternFromString(kind_names[k]))) return NULL;
    if (argc != 7 || !PyList_CheckExact(argv[0]) || !PyLong_Check(argv[1]) || !PyDict_CheckExact(argv[2]) ||
        !PyDict_CheckExact(argv[3]) || !PyTuple_Check(argv[6]) || PyTuple_GET_SIZE(argv[6]) != 4) {
        PyErr_SetString(PyExc_TypeError, "bind(slices: list, split: int, links: dict, carried: dict, rank, "
                                         "flow_id, layers: 4-tuple)");
        return NULL;
    }
    PyObject *slices = argv[0], *layers = argv[6];
    Py_ssize_t n = PyList_GET_SIZE(slices), split = PyLong_AsSsize_t(argv[1]);
    if (split == -1 && PyErr_Occurred()) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyList_GET_ITEM(slices, i);
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) != SLICE_FIELDS) {
            PyErr_SetString(PyExc_TypeError, "bind: expected Slices");
            return NULL;
        }
    }
    Bind b = {slices, argv[5], argv[4], NULL, NULL, 0, split, argv[3], PyDict_New()};
    PyObject *launches = PyDict_New(), *ops = PyDict_New(), *targets = PyDict_New(), *result = NULL;
    PyObject *device = PyTuple_GetSlice(layers, 1, 4), *async_layers = PyTuple_Pack(2, PyTuple_GET_ITEM(layers, 1),
                                                                                     PyTuple_GET_ITEM(layers, 3));
    PyObject *host = PyTuple_GetSlice(layers, 0, 1);
    b.outs = PyMem_Calloc(n ? n : 1, sizeof(PyObject *));
    b.ins = PyMem_Calloc(n ? n : 1, sizeof(PyObject *));
    if (!b.carried_out || !launches || !ops || !targets || !device || !async_layers || !host || !b.outs ||
        !b.ins)
        goto done;
    if (collect(slices, split, argv[2], &PyTuple_GET_ITEM(layers, 0), launches, ops, targets) < 0 ||
        arrows(&b, launches, targets, kinds[0], device) < 0 ||
        arrows(&b, ops, targets, kinds[1], async_layers) < 0 ||
        host_arrows(&b, ops, 1, kinds[2], host) < 0 || host_arrows(&b, ops, 0, kinds[3], host) < 0)
        goto done;
    int failed = 0;
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        if (!b.outs[i] && !b.ins[i]) continue;
        PyObject *made = with_flows(PyList_GET_ITEM(slices, i), b.outs[i], b.ins[i]);
        failed = !made || PyList_SetItem(slices, i, made) < 0;
    }
    if (!failed) result = Py_BuildValue("nO", b.backwards, b.carried_out);
done:
    if (b.outs && b.ins)
        for (Py_ssize_t i = 0; i < n; i++) { Py_XDECREF(b.outs[i]); Py_XDECREF(b.ins[i]); }
    PyMem_Free(b.outs); PyMem_Free(b.ins);
    Py_XDECREF(b.carried_out);
    Py_XDECREF(launches); Py_XDECREF(ops); Py_XDECREF(targets); Py_XDECREF(device); Py_XDECREF(async_layers);
    Py_XDECREF(host);
    return result;
}


/* -- rows to slices --------------------------------------------------------------------------- */

/* A value drawn as no arg: None, "" or "N/A" (ascend_db._NOTHING) */
static int nothing(PyObject *value) {
    if (value == Py_None) return 1;
    if (!PyUnicode_CheckExact(value)) return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(value);
    return n == 0 || (n == 3 && PyUnicode_CompareWithASCIIString(value, "N/A") == 0);
}

/* {key: value} of ``keys`` and the row's values from ``at`` on, but those that say nothing (or, if
 * ``only_none``, but None) */
static PyObject *args_of(PyObject *row, Py_ssize_t at, PyObject *keys, Py_ssize_t count, int only_none) {
    PyObject *args = PyDict_New();
    if (!args) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *value = PyTuple_GET_ITEM(row, at + i);
        if (only_none ? value == Py_None : nothing(value)) continue;
        if (PyDict_SetItem(args, PyTuple_GET_ITEM(keys, i), value) < 0) {
            Py_DECREF(args);
            return NULL;
        }
    }
    return args;
}

/* ``a or b``: a new reference to the first true one, else to ``b`` (NULL on error) */
static PyObject *either(PyObject *a, PyObject *b) {
    int true_ = PyObject_IsTrue(a);
    if (true_ < 0) return NULL;
    PyObject *chosen = true_ ? a : b;
    Py_INCREF(chosen);
    return chosen;
}

/* lanes.get(key) or lanes.setdefault(key, made): ``made`` formatted only for a new key (borrowed) */
static PyObject *lane_of(PyObject *lanes, PyObject *key, const char *format, PyObject *a, PyObject *b) {
    PyObject *lane = PyDict_GetItemWithError(lanes, key);
    if (lane || PyErr_Occurred()) return lane;
    PyObject *made = b ? PyUnicode_FromFormat(format, a, b) : PyUnicode_FromFormat(format, a);
    if (!made) return NULL;
    int rc = PyDict_SetItem(lanes, key, made);
    Py_DECREF(made);
    return rc < 0 ? NULL : made;  /* the dict holds it */
}

/* The TASK query's columns task_slices reads (ascend_db._TASK_COLUMNS), as spec[4] gives them */
enum { T_OK, T_KIND, T_START, T_DUR, T_STREAM, T_ARGS_AT, T_TASK_ARGS, T_ARGS, T_TASK_TYPE, T_NAME, T_PLACES };
#define COMPUTE_KIND 1
#define COMM_KIND 2

static int places(PyObject *spec_places, Py_ssize_t *at, Py_ssize_t count, Py_ssize_t width) {
    if (!PyTuple_Check(spec_places) || PyTuple_GET_SIZE(spec_places) != count) return -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        at[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec_places, i));
        if (at[i] < 0 || at[i] > width) return -1;
    }
    return 0;
}

/* task_slices(rows, i, out, spec, rank, lanes, all_tasks) -> the index of the first row from i on that
 * the rules must read (len(rows) if none): the rows before it that SQLite says are as expected
 * appended to ``out`` as their Slices (ascend_db._Reader.tasks). spec: (Slice, Layer.STREAM,
 * NOT_COMPUTE, the args' keys, the columns' places). */
static PyObject *task_slices(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    PyObject *rows = argv[0], *out = argv[2], *spec = argv[3], *rank = argv[4], *lanes = argv[5];
    Py_ssize_t at[T_PLACES];
    if (argc != 7 || !PyList_CheckExact(rows) || !PyList_CheckExact(out) || !PyDict_CheckExact(lanes) ||
        !PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 5 || !PyType_Check(PyTuple_GET_ITEM(spec, 0)) ||
        !PyTuple_Check(PyTuple_GET_ITEM(spec, 3)) || places(PyTuple_GET_ITEM(spec, 4), at, T_PLACES, 1000) < 0) {
        PyErr_SetString(PyExc_TypeError, "task_slices(rows, i, out, spec, rank, lanes, all_tasks)");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)PyTuple_GET_ITEM(spec, 0);
    PyObject *layer = PyTuple_GET_ITEM(spec, 1), *not_compute = PyTuple_GET_ITEM(spec, 2),
             *keys = PyTuple_GET_ITEM(spec, 3);
    int all_tasks = PyObject_IsTrue(argv[6]);
    Py_ssize_t i = PyLong_AsSsize_t(argv[1]), width = at[T_ARGS];
    if (all_tasks < 0 || (i == -1 && PyErr_Occurred())) return NULL;
    if (at[T_ARGS] - at[T_ARGS_AT] != PyTuple_GET_SIZE(keys)) {
        PyErr_SetString(PyExc_ValueError, "task_slices: as many keys as args");
        return NULL;
    }
    for (Py_ssize_t p = 0; p < T_PLACES; p++) width = at[p] > width ? at[p] : width;
    static PyObject *task, *empty;
    if (!task && !(task = PyUnicode_InternFromString("Task"))) return NULL;
    if (!empty && !(empty = PyUnicode_InternFromString(""))) return NULL;
    for (; i < PyList_GET_SIZE(rows); i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) <= width) {
            PyErr_SetString(PyExc_TypeError, "task_slices: a row of the TASK query");
            return NULL;
        }
        int ok = PyObject_IsTrue(PyTuple_GET_ITEM(row, at[T_OK]));
        if (ok < 0) return NULL;
        PyObject *kind = PyTuple_GET_ITEM(row, at[T_KIND]);
        long k = PyLong_CheckExact(kind) ? PyLong_AsLong(kind) : 0;
        int computes = PyObject_IsTrue(kind);
        if ((k == -1 && PyErr_Occurred()) || computes < 0) return NULL;
        if (!ok || k == COMM_KIND) break;  /* the rules' */
        if (k != COMPUTE_KIND && !all_tasks) continue;
        PyObject *args = args_of(row, at[T_ARGS_AT], keys,
                                 (k == COMPUTE_KIND ? at[T_ARGS] : at[T_TASK_ARGS]) - at[T_ARGS_AT], 0);
        PyObject *task_type = either(PyTuple_GET_ITEM(row, at[T_TASK_TYPE]), empty), *name = NULL, *s = NULL;
        PyObject *lane = lane_of(lanes, PyTuple_GET_ITEM(row, at[T_STREAM]), "Stream %S",
                                 PyTuple_GET_ITEM(row, at[T_STREAM]), NULL);
        if (task_type && lane) {
            PyObject *named = either(PyTuple_GET_ITEM(row, at[T_NAME]), task_type);
            name = named ? either(named, task) : NULL;
            Py_XDECREF(named);
        }
        if (name) {
            PyObject *start = PyTuple_GET_ITEM(row, at[T_START]), *dur = PyTuple_GET_ITEM(row, at[T_DUR]);
            Py_INCREF(start); Py_INCREF(dur); Py_XINCREF(args);
            s = new_slice(type, rank, layer, lane, name, start, dur, args, computes ? task_type : not_compute);
        }
        Py_XDECREF(args); Py_XDECREF(task_type); Py_XDECREF(name);
        if (!s || PyList_Append(out, s) < 0) {
            Py_XDECREF(s);
            return NULL;
        }
        Py_DECREF(s);
    }
    return PyLong_FromSsize_t(i);
}

/* A host query's columns (ascend_db._Reader.host): ok, links, startNs, endNs, name, globalTid, then
 * the args */
enum { H_OK, H_LINKS, H_START, H_END, H_NAME, H_TID, H_ARGS };

/* host_slices(rows, i, out, spec, rank, offset, lanes, prefix, api, links) -> the index of the first
 * row from i on that the rules must read (len(rows) if none): the rows before it that SQLite says are
 * as expected appended to ``out`` as their Slices (ascend_db._Reader.host), their PyTorch links
 * noted in ``links``. spec: (Slice, Layer.HOST, the args' keys); api: CANN's API types by id, or None. */
static PyObject *host_slices(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 10 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[2]) || !PyTuple_Check(argv[3]) ||
        PyTuple_GET_SIZE(argv[3]) != 3 || !PyType_Check(PyTuple_GET_ITEM(argv[3], 0)) ||
        !PyTuple_Check(PyTuple_GET_ITEM(argv[3], 2)) || !PyDict_CheckExact(argv[6]) ||
        !PyUnicode_Check(argv[7]) || (argv[8] != Py_None && !PyDict_CheckExact(argv[8])) ||
        !PyDict_CheckExact(argv[9])) {
        PyErr_SetString(PyExc_TypeError, "host_slices(rows, i, out, spec, rank, offset, lanes, prefix, api, links)");
        return NULL;
    }
    PyObject *rows = argv[0], *out = argv[2], *rank = argv[4], *offset = argv[5], *lanes = argv[6],
             *prefix = argv[7], *api = argv[8], *links = argv[9];
    PyTypeObject *type = (PyTypeObject *)PyTuple_GET_ITEM(argv[3], 0);
    PyObject *layer = PyTuple_GET_ITEM(argv[3], 1), *keys = PyTuple_GET_ITEM(argv[3], 2);
    Py_ssize_t i = PyLong_AsSsize_t(argv[1]), count = PyTuple_GET_SIZE(keys);
    if (i == -1 && PyErr_Occurred()) return NULL;
    static PyObject *type_key, *empty;
    if (!type_key && !(type_key = PyUnicode_InternFromString("type"))) return NULL;
    if (!empty && !(empty = PyUnicode_InternFromString(""))) return NULL;
    for (; i < PyList_GET_SIZE(rows); i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) < H_ARGS + count) {
            PyErr_SetString(PyExc_TypeError, "host_slices: a row of the host query");
            return NULL;
        }
        int ok = PyObject_IsTrue(PyTuple_GET_ITEM(row, H_OK));
        if (ok < 0) return NULL;
        if (!ok) break;
        PyObject *tid = PyTuple_GET_ITEM(row, H_TID), *start = PyTuple_GET_ITEM(row, H_START);
        PyObject *args = args_of(row, H_ARGS, keys, count, 1), *s = NULL;
        if (args && api != Py_None) {  /* args["type"] = api.get(kind, kind) */
            PyObject *kind = PyDict_GetItemWithError(args, type_key);
            PyObject *named = kind ? PyDict_GetItemWithError(api, kind) : NULL;
            if (named && PyDict_SetItem(args, type_key, named) < 0) Py_CLEAR(args);
            if (PyErr_Occurred()) Py_CLEAR(args);
        }
        PyObject *link = PyTuple_GET_ITEM(row, H_LINKS);
        if (args && link != Py_None && PyDict_SetItem(links, PyTuple_GET_ITEM(row, H_ARGS), link) < 0)
            Py_CLEAR(args);
        unsigned long long thread = args ? PyLong_AsUnsignedLongLongMask(tid) & 0xFFFFFFFFULL : 0;
        PyObject *number = args && !PyErr_Occurred() ? PyLong_FromUnsignedLongLong(thread) : NULL;
        PyObject *lane = number ? lane_of(lanes, tid, "%U (thread %S)", prefix, number) : NULL;
        PyObject *name = lane ? either(PyTuple_GET_ITEM(row, H_NAME), prefix) : NULL;
        Py_XDECREF(number);
        if (name) {
            s = new_slice(type, rank, layer, lane, name, PyNumber_Add(start, offset),
                          PyNumber_Subtract(PyTuple_GET_ITEM(row, H_END), start), args, empty);
            args = NULL;
        }
        Py_XDECREF(args); Py_XDECREF(name);
        if (!s || PyList_Append(out, s) < 0) {
            Py_XDECREF(s);
            return NULL;
        }
        Py_DECREF(s);
    }
    return PyLong_FromSsize_t(i);
}

/* -- the scans merged and filed by step --------------------------------------------------------- */

typedef struct {
    PyObject *head;    /* [iterator of batches, batch, position] (borrowed from ``heads``) */
    Py_ssize_t pos;
    long long start;   /* of batch[pos] */
    int alive;
} Head;

/* head's batch[pos]'s start_ns: a Slice's or a Sample's */
static int start_of(Head *h, PyTypeObject *slice_type, PyTypeObject *sample_type) {
    PyObject *r = PyList_GET_ITEM(PyList_GET_ITEM(h->head, 1), h->pos), *start;
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
    while (h->pos >= PyList_GET_SIZE(PyList_GET_ITEM(h->head, 1))) {
        PyObject *batch = PyIter_Next(PyList_GET_ITEM(h->head, 0));
        if (!batch) {
            h->alive = 0;
            return PyErr_Occurred() ? -1 : 0;
        }
        if (!PyList_CheckExact(batch)) {
            Py_DECREF(batch);
            PyErr_SetString(PyExc_TypeError, "fill: a scan gave a batch that is no list");
            return -1;
        }
        PyList_SetItem(h->head, 1, batch);  /* takes it: the old batch is done */
        h->pos = 0;
    }
    return start_of(h, slice_type, sample_type);
}

/* fill(heads, next_start, slices, samples, Slice, Sample): the scans' records that start before
 * next_start, in time order (ties: the earlier scan's first, as heapq.merge gives them), appended to
 * ``slices`` and ``samples``; each head a list [iterator of batches (lists of records in time
 * order), the batch read, the position in it] (ascend_db._by_step). */
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
        if (!PyList_CheckExact(head) || PyList_GET_SIZE(head) != 3 || !PyList_CheckExact(PyList_GET_ITEM(head, 1))) {
            PyErr_SetString(PyExc_TypeError, "fill: a head is [iterator, batch, position]");
            rc = -1;
            break;
        }
        h[i].head = head;
        h[i].alive = 1;
        h[i].pos = PyLong_AsSsize_t(PyList_GET_ITEM(head, 2)) - 1;
        rc = h[i].pos < -1 ? -1 : advance(&h[i], slice_type, sample_type);
    }
    while (rc == 0) {
        Head *first = NULL;
        for (i = 0; i < n; i++)
            if (h[i].alive && (!first || h[i].start < first->start)) first = &h[i];
        if (!first || first->start >= next_start) break;
        PyObject *r = PyList_GET_ITEM(PyList_GET_ITEM(first->head, 1), first->pos);
        rc = PyList_Append(Py_IS_TYPE(r, slice_type) ? slices : samples, r);
        if (rc == 0) rc = advance(first, slice_type, sample_type);
    }
    for (i = 0; i < n && h[i].head; i++) {  /* where each head stands */
        PyObject *pos = PyLong_FromSsize_t(h[i].pos);
        if (!pos || PyList_SetItem(h[i].head, 2, pos) < 0) rc = -1;
    }
    PyMem_Free(h);
    if (rc < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "fill: a head's position is negative");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(slices, split, links, carried, rank, flow_id, (HOST, STREAM, COMM_TASK, COMM_OP)) -> (arrows left "
     "out as backwards, links carried on): a step's arrows, the slices rebuilt in place"},
    {"task_slices", (PyCFunction)(void (*)(void))task_slices, METH_FASTCALL,
     "task_slices(rows, i, out, spec, rank, lanes, all_tasks) -> the first row the rules must read"},
    {"host_slices", (PyCFunction)(void (*)(void))host_slices, METH_FASTCALL,
     "host_slices(rows, i, out, spec, rank, offset, lanes, prefix, api, links) -> the first row the "
     "rules must read"},
    {"fill", (PyCFunction)(void (*)(void))fill, METH_FASTCALL,
     "fill(heads, next_start, slices, samples, Slice, Sample): the scans' records before next_start, "
     "merged by time"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_db_core", .m_doc = "The database form's per-slice work.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__db_core(void) { return PyModule_Create(&module); }
