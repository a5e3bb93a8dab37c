/* ascend_db_flows.Flows.bind_rules in C: the arrows a step starts, into it and the next step (bind).
 * tests/readers/test_ascend_db_core.py holds it to bind_rules. */
#include "db_core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>  /* memmem: Python.h defines _GNU_SOURCE */

/* What one bind works with */
typedef struct {
    PyObject *slices, *flow_id, *rank, *queue;  /* queue: the names a task queue's ops start with */
    PyObject **outs, **ins;  /* per slice: the flow ids out of it, into it (tuples), or NULL */
    Py_ssize_t backwards, split;  /* arrows start before split; those reaching past it are carried */
    PyObject *carried, *carried_out;  /* kind -> the links drawn into this step before, into the next */
} Bind;

/* A tuple of flow ids left to the collector's care no more: ints make no cycle, and a step's 11,000
 * arrows' tuples, tracked, were walked by each collection the step's allocations set off (a tenth
 * of its reading) */
static void untrack_ints(PyObject *flows) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(flows); i++)
        if (!PyLong_CheckExact(PyTuple_GET_ITEM(flows, i))) return;
    PyObject_GC_UnTrack(flows);
}

/* *ends + flows (a tuple; *ends one too, or NULL for none) */
static int add_flows(PyObject **ends, PyObject *flows) {
    PyObject *grown = *ends ? PySequence_Concat(*ends, flows) : (Py_INCREF(flows), flows);
    if (!grown) return -1;
    untrack_ints(grown);
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

/* f"{rank}|{kind}:{link}|" into ``key`` where the rank and link are ints (and the kind ASCII): its
 * length, or -1 (PyUnicode_FromFormat makes it then, no error set) */
static int flow_key(char *key, size_t size, PyObject *rank, PyObject *kind, PyObject *link) {
    if (!PyLong_CheckExact(rank) || !PyLong_CheckExact(link) || !PyUnicode_IS_ASCII(kind)) return -1;
    int overflow_rank = 0, overflow_link = 0;
    long long r = PyLong_AsLongLongAndOverflow(rank, &overflow_rank);
    long long l = PyLong_AsLongLongAndOverflow(link, &overflow_link);
    if (overflow_rank || overflow_link) return -1;  /* an exact int raises nothing */
    int n = snprintf(key, size, "%lld|%s:%lld|", r, (const char *)PyUnicode_DATA(kind), l);
    return n > 0 && (size_t)n < size ? n : -1;
}

/* key + str(k): an arrow's text, its flow id's (``decimal``: snprintf's format parsing was a tenth of bind) */
static PyObject *flow_text(const char *key, int key_len, Py_ssize_t k) {
    char text[160 + DECIMAL_ROOM];
    memcpy(text, key, key_len);
    return PyUnicode_DecodeASCII(text, decimal(text + key_len, k) - text, NULL);
}

/* One launch's arrows: to each of its ``ends`` (an index, or a list of them) on ``layers``, the k-th
 * numbered k, none backwards in time; its link carried if one reaches past the split, none drawn if
 * it was carried (ascend_db_flows._Arrows.draw) */
static int launch_arrows(Bind *b, Py_ssize_t first, PyObject *link, PyObject *ends, PyObject *kind,
                         PyObject *layers) {
    int done = carried(b, kind, link);
    if (done) return done < 0 ? -1 : 0;
    PyObject *start = PyTuple_GET_ITEM(PyList_GET_ITEM(b->slices, first), SLICE_START_NS);
    char key[128];  /* the texts' start, "rank|kind:link|", where the rank and link are ints */
    int key_len = flow_key(key, sizeof key, b->rank, kind, link);
    PyObject *key_text = key_len < 0 ? PyUnicode_FromFormat("%S|%U:%S|", b->rank, kind, link) : NULL;
    if (key_len < 0 && !key_text) return -1;
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
        PyObject *text = key_text ? PyUnicode_FromFormat("%U%zd", key_text, k) : flow_text(key, key_len, k);
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
    Py_XDECREF(key_text);
    Py_XDECREF(flows);
    return rc;
}

/* The last of ``ends`` (an index, or a list of them ascending) before ``split``; -1 for none, -2 for
 * an error (ascend_db_flows._last_before) */
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
            for (Py_ssize_t q = 0; !queued && q < PyTuple_GET_SIZE(b->queue); q++)  /* name.startswith(queue) */
                queued = PyUnicode_Tailmatch(name, PyTuple_GET_ITEM(b->queue, q), 0, PY_SSIZE_T_MAX, -1) == 1;
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

/* A slice's connection_id (new reference), or NULL (no error set: none): its args' where they are a
 * dict, or where they are Rows' JSON text (whose connection_id is an int, written first or after
 * another member: ``"connection_id":`` after ``{`` or ``,`` is a key, a string's quotes being escaped) */
static PyObject *link_of(PyObject *args, PyObject *connection_id) {
    if (PyDict_CheckExact(args)) {
        PyObject *link = PyDict_GetItemWithError(args, connection_id);
        Py_XINCREF(link);
        return link;
    }
    if (!PyBytes_CheckExact(args)) return NULL;
    static const char key[] = "\"connection_id\":";
    const char *text = PyBytes_AS_STRING(args), *end = text + PyBytes_GET_SIZE(args), *at = text + 1;
    /* first, as a host call's args have it: half the slices, no memmem call for them */
    if (end - at < (Py_ssize_t)sizeof key - 1 || *text != '{' || memcmp(at, key, sizeof key - 1) != 0)
        for (at = text; (at = memmem(at, end - at, key, sizeof key - 1)) &&
                        !(at > text && (at[-1] == '{' || at[-1] == ',')); at++) {}
    if (!at) return NULL;
    char *past;
    errno = 0;
    long long link = strtoll(at + sizeof key - 1, &past, 10);
    if (errno || past == at + sizeof key - 1 || (*past != ',' && *past != '}')) {
        PyErr_SetString(PyExc_ValueError, "bind: raw args whose connection_id is no int");
        return NULL;
    }
    return PyLong_FromLongLong(link);
}

/* The i-th slice's ``link`` noted where bind_rules' first loop notes it: a launch, an op, a target */
static int linked(Py_ssize_t split, PyObject *links, PyObject *rules, PyObject *launches,
                  PyObject *ops, PyObject *targets, Py_ssize_t i, PyObject *s, PyObject *link) {
    static PyObject *cann, *pytorch;
    if (!cann && !(cann = PyUnicode_InternFromString("CANN"))) return -1;
    if (!pytorch && !(pytorch = PyUnicode_InternFromString("PyTorch"))) return -1;
    PyObject *host = PyTuple_GET_ITEM(rules, BIND_RULES_HOST), *kind = PyTuple_GET_ITEM(s, SLICE_LAYER);
    PyObject *lane = PyTuple_GET_ITEM(s, SLICE_LANE);
    if (i >= split && kind != host) {  /* the next step's: only the targets of this step's starts */
        int wanted = PyDict_Contains(launches, link);
        if (wanted == 0) wanted = PyDict_Contains(ops, link);
        if (wanted <= 0) return wanted;
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
    } else if (kind == PyTuple_GET_ITEM(rules, BIND_RULES_STREAM) || kind == PyTuple_GET_ITEM(rules, BIND_RULES_COMM_TASK) ||
               kind == PyTuple_GET_ITEM(rules, BIND_RULES_COMM_OP)) {
        rc = add_end(targets, link, index);
    }
    Py_DECREF(index);
    return rc;
}

/* Which slices launch and which are launched: ascend_db_flows.Flows.bind_rules' first loop */
static int collect(PyObject *slices, Py_ssize_t split, PyObject *links, PyObject *rules,
                   PyObject *launches, PyObject *ops, PyObject *targets) {
    static PyObject *connection_id;
    if (!connection_id && !(connection_id = PyUnicode_InternFromString("connection_id"))) return -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(slices); i++) {
        PyObject *s = PyList_GET_ITEM(slices, i), *link = link_of(PyTuple_GET_ITEM(s, SLICE_ARGS), connection_id);
        if (!link) {
            if (PyErr_Occurred()) return -1;
            continue;
        }
        if (link == Py_None) {
            Py_DECREF(link);
            continue;
        }
        int rc = linked(split, links, rules, launches, ops, targets, i, s, link);
        Py_DECREF(link);
        if (rc < 0) return -1;
    }
    return 0;
}

/* The rules' names a task queue's ops start with: a tuple of str, else NULL with an error set */
static PyObject *queue_names(PyObject *rules) {
    PyObject *queue = PyTuple_GET_ITEM(rules, BIND_RULES_QUEUE);
    for (Py_ssize_t q = 0; PyTuple_Check(queue) && q < PyTuple_GET_SIZE(queue); q++)
        if (!PyUnicode_Check(PyTuple_GET_ITEM(queue, q))) queue = NULL;
    if (!queue || !PyTuple_Check(queue)) PyErr_SetString(PyExc_TypeError, "bind: BindRules.queue is a tuple of str");
    return queue && PyTuple_Check(queue) ? queue : NULL;
}

/* bind(slices, split, links, carried, rank, flow_id, rules) -> (the arrows left out as backwards, the
 * links carried into the next step): ascend_db_flows.Flows.bind_rules, the slices rebuilt in place (a
 * slice's arrows out and in added at once); ``rules`` an ascend_db_flows.BindRules. */
static PyObject *bind(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    static PyObject *kinds[4];
    static const char *kind_names[4] = {"HostToDevice", "async_npu", "async_task_queue", "fwdbwd"};
    for (int k = 0; k < 4; k++)
        if (!kinds[k] && !(kinds[k] = PyUnicode_InternFromString(kind_names[k]))) return NULL;
    if (argc != 7 || !PyList_CheckExact(argv[0]) || !PyLong_Check(argv[1]) || !PyDict_CheckExact(argv[2]) ||
        !PyDict_CheckExact(argv[3]) || !PyTuple_Check(argv[6]) || PyTuple_GET_SIZE(argv[6]) != BIND_RULES_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "bind(slices: list, split: int, links: dict, carried: dict, rank, "
                                         "flow_id, rules: BindRules)");
        return NULL;
    }
    PyObject *slices = argv[0], *rules = argv[6], *queue = queue_names(rules);
    if (!queue) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(slices), split = PyLong_AsSsize_t(argv[1]);
    if (split == -1 && PyErr_Occurred()) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyList_GET_ITEM(slices, i);
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) != SLICE_FIELDS) {
            PyErr_SetString(PyExc_TypeError, "bind: expected Slices");
            return NULL;
        }
    }
    Bind b = {.slices = slices, .flow_id = argv[5], .rank = argv[4], .queue = queue, .split = split,
              .carried = argv[3], .carried_out = PyDict_New()};
    PyObject *launches = PyDict_New(), *ops = PyDict_New(), *targets = PyDict_New(), *result = NULL;
    PyObject *stream = PyTuple_GET_ITEM(rules, BIND_RULES_STREAM), *comm_op = PyTuple_GET_ITEM(rules, BIND_RULES_COMM_OP);
    PyObject *device = PyTuple_Pack(3, stream, PyTuple_GET_ITEM(rules, BIND_RULES_COMM_TASK), comm_op);
    PyObject *async_layers = PyTuple_Pack(2, stream, comm_op), *host = PyTuple_Pack(1, PyTuple_GET_ITEM(rules, BIND_RULES_HOST));
    b.outs = PyMem_Calloc(n ? n : 1, sizeof(PyObject *));
    b.ins = PyMem_Calloc(n ? n : 1, sizeof(PyObject *));
    if (!b.carried_out || !launches || !ops || !targets || !device || !async_layers || !host || !b.outs ||
        !b.ins)
        goto done;
    if (collect(slices, split, argv[2], rules, launches, ops, targets) < 0 ||
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


PyMethodDef FLOWS_METHODS[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(slices, split, links, carried, rank, flow_id, rules: BindRules) -> (arrows left "
     "out as backwards, links carried on): a step's arrows, the slices rebuilt in place"},
    {NULL, NULL, 0, NULL},
};
