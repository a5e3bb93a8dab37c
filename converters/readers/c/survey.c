/* launches.Survey.add over a scanned batch (RawEvents: events.c): Kineto's first pass looks at every
 * event for its launches (a cuda_runtime / cuda_driver event's correlation id, time and thread) and
 * its communication ops, and made an Event of each to sort them out by comprehension (a fifth of a
 * conversion's CPU). Here they are sorted out by the text of their fields, no object made but for
 * what is kept; a launch's correlation id is read from its args' text (values.c's correlation_in)
 * and its time as the batch's decoding gives it (span_ns: Kineto's floats by their text). A launch
 * whose id or time the text alone does not give, and every communication op, is handed to the
 * Python rule (Survey._launch, Survey._op) as the Event the batch's decoding gives. Also any_named:
 * whether a batch holds an event of some categories named with a prefix (kineto._is_execution).
 * The rule: launches.Survey.add over the decoded batch; held to it by
 * tests/readers/test_kineto_scan.py (scanned batches against decoded ones). */
#include "core.h"

#include <string.h>

/* A set of str (categories) or a tuple of them (name prefixes), as UTF-8 texts */
#define MAX_TEXTS 16
typedef struct { const char *text[MAX_TEXTS]; Py_ssize_t n[MAX_TEXTS]; int count; PyObject *set; } Texts;

/* ``items`` (a frozenset or tuple of str) into ``t``: 0, or -1 with an error */
static int texts_of(PyObject *items, Texts *t) {
    t->count = 0;
    t->set = PyAnySet_Check(items) ? items : NULL;
    PyObject *iter = PyObject_GetIter(items), *item;
    if (!iter) return -1;
    while ((item = PyIter_Next(iter))) {
        int ok = PyUnicode_CheckExact(item) && t->count < MAX_TEXTS;
        if (ok) t->text[t->count] = PyUnicode_AsUTF8AndSize(item, &t->n[t->count]);  /* held by ``items`` */
        Py_DECREF(item);
        if (!ok) {
            PyErr_SetString(PyExc_TypeError, "survey: categories and prefixes are a few str");
            break;
        }
        if (!t->text[t->count++]) break;
    }
    Py_DECREF(iter);
    return PyErr_Occurred() ? -1 : 0;
}

/* 1 if the event's category is one of ``cats`` (``e.cat in cats``), 0 if not, -1 on error */
static int in_cats(const RawEvents *r, const RawEvent *e, const Texts *cats) {
    const Span *sp = &e->f[F_CAT];
    if (sp->kind == K_STR) {  /* no escapes: its UTF-8 as written */
        const char *text = span_text(r, sp) + 1;
        for (int i = 0; i < cats->count; i++)
            if (cats->n[i] == sp->len - 2 && !memcmp(cats->text[i], text, sp->len - 2)) return 1;
        return 0;
    }
    if (sp->kind != K_STR_ESC) return 0;  /* a number or None is in no set of str */
    PyObject *cat = span_value(r, sp, F_CAT);
    int found = cat ? PySet_Contains(cats->set, cat) : -1;
    Py_XDECREF(cat);
    return found;
}

/* 1 if field ``f`` is a str starting with one of ``prefixes``, 0 if not, -1 on error */
static int starts_with(const RawEvents *r, const RawEvent *e, int f, const Texts *prefixes) {
    const Span *sp = &e->f[f];
    if (sp->kind == K_STR) {
        const char *text = span_text(r, sp) + 1;
        for (int i = 0; i < prefixes->count; i++)
            if (prefixes->n[i] <= sp->len - 2 && !memcmp(prefixes->text[i], text, prefixes->n[i])) return 1;
        return 0;
    }
    if (sp->kind != K_STR_ESC) return 0;
    PyObject *value = span_value(r, sp, f);
    if (!value) return -1;
    int found = 0;
    for (int i = 0; PyUnicode_CheckExact(value) && i < prefixes->count && !found; i++) {
        PyObject *prefix = PyUnicode_DecodeUTF8(prefixes->text[i], prefixes->n[i], NULL);
        Py_ssize_t at = prefix ? PyUnicode_Tailmatch(value, prefix, 0, PY_SSIZE_T_MAX, -1) : -1;
        Py_XDECREF(prefix);
        found = at < 0 ? -1 : (int)at;
    }
    Py_DECREF(value);
    return found;
}

/* 1 if the event's ph is "X" (``e.ph == "X"``), 0 if not, -1 on error */
static int is_complete(const RawEvents *r, const RawEvent *e) {
    const Span *sp = &e->f[F_PH];
    if (sp->kind == K_STR) return sp->len == 3 && span_text(r, sp)[1] == 'X';
    if (sp->kind != K_STR_ESC) return 0;
    PyObject *ph = span_value(r, sp, F_PH);
    int found = ph ? PyUnicode_CheckExact(ph) && PyUnicode_CompareWithASCIIString(ph, "X") == 0 : -1;
    Py_XDECREF(ph);
    return found;
}

/* The growing arrays of launches a batch adds: ids and times int64, thread indices C ints (array "i") */
typedef struct { long long *ids, *times; int *threads; Py_ssize_t n, cap; } Found;

static int found_add(Found *f, long long id, long long ts, int thread) {
    if (f->n == f->cap) {
        Py_ssize_t cap = f->cap ? 2 * f->cap : 256;
        long long *ids = PyMem_Realloc(f->ids, cap * sizeof *ids);
        if (ids) f->ids = ids;
        long long *times = ids ? PyMem_Realloc(f->times, cap * sizeof *times) : NULL;
        if (times) f->times = times;
        int *threads = times ? PyMem_Realloc(f->threads, cap * sizeof *threads) : NULL;
        if (!threads) { PyErr_NoMemory(); return -1; }
        f->threads = threads;
        f->cap = cap;
    }
    f->ids[f->n] = id;
    f->times[f->n] = ts;
    f->threads[f->n++] = thread;
    return 0;
}

static PyObject *as_bytes(const void *at, size_t n) { return PyBytes_FromStringAndSize(n ? at : "", (Py_ssize_t)n); }

/* The threads met, by their tid's text, and their index in Survey._thread_index (by the tid's value) */
#define THREAD_SLOTS 16
typedef struct { const char *text; uint32_t len; uint8_t kind; int index; } ThreadSlot;
typedef struct { ThreadSlot slots[THREAD_SLOTS]; int n; PyObject *index; } Threads;

/* The index of the event's thread (``threads.get(tid)``, else the next one, added): >= 0, or -1 */
static int thread_of(const RawEvents *r, const RawEvent *e, Threads *t) {
    const Span *sp = &e->f[F_TID];
    const char *text = span_text(r, sp);
    for (int i = 0; i < t->n; i++)
        if (t->slots[i].kind == sp->kind && t->slots[i].len == sp->len && !memcmp(t->slots[i].text, text, sp->len))
            return t->slots[i].index;
    PyObject *tid = span_value(r, sp, F_TID), *known = tid ? PyDict_GetItemWithError(t->index, tid) : NULL;
    long index = -1;
    if (known) {
        index = PyLong_AsLong(known);
    } else if (tid && !PyErr_Occurred()) {
        PyObject *next = PyLong_FromSsize_t(PyDict_GET_SIZE(t->index));
        if (next && PyDict_SetItem(t->index, tid, next) == 0) index = PyLong_AsLong(next);
        Py_XDECREF(next);
    }
    Py_XDECREF(tid);
    if (index < 0 || index > INT32_MAX) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "survey: thread indices are small ints");
        return -1;
    }
    if (t->n < THREAD_SLOTS) t->slots[t->n++] = (ThreadSlot){text, sp->len, sp->kind, (int)index};
    return (int)index;
}

/* A launch's correlation id and time (with the clock offset) from its text: 1, 2 where it has no
 * id (left out, as the rule leaves it), 0 for the Python rule */
static int launch_of_text(const RawEvents *r, const RawEvent *e, long long offset, long long *id, long long *ts) {
    const Span *args = &e->f[F_ARGS];
    int has = correlation_in(span_text(r, args), args->len, id);
    if (has != 1) return has;
    if (!span_ns(r, &e->f[F_TS], F_TS, ts) || __builtin_add_overflow(*ts, offset, ts)) return 0;
    return *ts > -TIME_LIMIT_NS && *ts < TIME_LIMIT_NS;  /* model.checked_ns: else the rule says */
}

/* A launch by the Python rule (``launch(event)``: (id, time) or None): 1, 2 none, -1 on error */
static int launch_by_rule(const RawEvents *r, Py_ssize_t i, PyObject *launch, long long *id, long long *ts) {
    PyObject *event = raw_event(r, i), *kept = event ? PyObject_CallOneArg(launch, event) : NULL;
    Py_XDECREF(event);
    if (!kept) return -1;
    int rc = kept == Py_None ? 2 : PyArg_ParseTuple(kept, "LL", id, ts) ? 1 : -1;
    Py_DECREF(kept);
    return rc;
}

/* survey(events, launch_cats, op_cats, comm_ops, graph_launches, offset, thread_index, graphs, op, launch)
 * -> (ids, times, threads): Survey.add of a RawEvents. First every communication op (an "X" of
 * ``op_cats`` with args, named with one of ``comm_ops``) by ``op(event)``; then the launches (an "X"
 * of ``launch_cats`` with args), in order: their ids, times and thread indices (``thread_index``:
 * Survey._thread_index, added to) as the bytes of arrays "q", "q", "i", a graph replay's id (named
 * with one of ``graph_launches``) added to ``graphs``. */
static PyObject *survey(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    RawEvents *r = argc == 10 ? raw_batch(argv[0]) : NULL;
    if (!r || !PyAnySet_Check(argv[1]) || !PyAnySet_Check(argv[2]) || !PyTuple_Check(argv[3]) ||
        !PyTuple_Check(argv[4]) || !PyDict_Check(argv[6]) || !PySet_Check(argv[7])) {
        PyErr_SetString(PyExc_TypeError, "survey(events: RawEvents, launch_cats: frozenset, op_cats: frozenset, "
                                         "comm_ops: tuple, graph_launches: tuple, offset: int, thread_index: dict, "
                                         "graphs: set, op, launch)");
        return NULL;
    }
    Texts launch_cats, op_cats, comm_ops, graph_launches;
    if (texts_of(argv[1], &launch_cats) < 0 || texts_of(argv[2], &op_cats) < 0 || texts_of(argv[3], &comm_ops) < 0 ||
        texts_of(argv[4], &graph_launches) < 0)
        return NULL;
    long long offset = PyLong_AsLongLong(argv[5]);
    if (offset == -1 && PyErr_Occurred()) return NULL;
    PyObject *graphs = argv[7], *op = argv[8], *launch = argv[9], *result = NULL;
    Threads threads = {.n = 0, .index = argv[6]};
    Found found = {NULL, NULL, NULL, 0, 0};
    for (Py_ssize_t i = 0; i < r->n; i++) {  /* the ops first, as the rule takes them */
        const RawEvent *e = &r->events[i];
        if (e->f[F_ARGS].kind == K_ABSENT) continue;
        int is_op = in_cats(r, e, &op_cats);
        if (is_op > 0) is_op = starts_with(r, e, F_NAME, &comm_ops);
        if (is_op > 0) is_op = is_complete(r, e);
        if (is_op < 0) goto done;
        if (!is_op) continue;
        PyObject *event = raw_event(r, i), *done_op = event ? PyObject_CallOneArg(op, event) : NULL;
        Py_XDECREF(event);
        if (!done_op) goto done;
        Py_DECREF(done_op);
    }
    for (Py_ssize_t i = 0; i < r->n; i++) {
        const RawEvent *e = &r->events[i];
        if (e->f[F_ARGS].kind == K_ABSENT) continue;
        int is_launch = in_cats(r, e, &launch_cats);
        if (is_launch > 0) is_launch = is_complete(r, e);
        if (is_launch < 0) goto done;
        if (!is_launch) continue;
        long long id, ts;
        int kept = launch_of_text(r, e, offset, &id, &ts);
        if (!kept) kept = launch_by_rule(r, i, launch, &id, &ts);
        if (kept < 0) goto done;
        if (kept == 2) continue;
        int thread = thread_of(r, e, &threads), graph = thread < 0 ? -1 : starts_with(r, e, F_NAME, &graph_launches);
        if (graph < 0 || found_add(&found, id, ts, thread) < 0) goto done;
        if (graph) {
            PyObject *key = PyLong_FromLongLong(id);
            int rc = key ? PySet_Add(graphs, key) : -1;
            Py_XDECREF(key);
            if (rc < 0) goto done;
        }
    }
    result = Py_BuildValue("(NNN)", as_bytes(found.ids, found.n * sizeof(long long)),  /* NULL: an error set */
                           as_bytes(found.times, found.n * sizeof(long long)),
                           as_bytes(found.threads, found.n * sizeof(int)));
done:
    PyMem_Free(found.ids);
    PyMem_Free(found.times);
    PyMem_Free(found.threads);
    return result;
}

/* any_named(events, cats, prefixes) -> bool: whether an event of the RawEvents is of one of ``cats``
 * (a frozenset of str) and named with one of ``prefixes`` (a tuple of str): kineto._is_execution's
 * events (gloo's ranges) over a scanned batch. */
static PyObject *any_named(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    RawEvents *r = argc == 3 ? raw_batch(argv[0]) : NULL;
    if (!r || !PyAnySet_Check(argv[1]) || !PyTuple_Check(argv[2])) {
        PyErr_SetString(PyExc_TypeError, "any_named(events: RawEvents, cats: frozenset, prefixes: tuple)");
        return NULL;
    }
    Texts cats, prefixes;
    if (texts_of(argv[1], &cats) < 0 || texts_of(argv[2], &prefixes) < 0) return NULL;
    for (Py_ssize_t i = 0; i < r->n; i++) {
        int found = in_cats(r, &r->events[i], &cats);
        if (found > 0) found = starts_with(r, &r->events[i], F_NAME, &prefixes);
        if (found) return found < 0 ? NULL : Py_NewRef(Py_True);
    }
    Py_RETURN_FALSE;
}

/* The index of the latest-starting window (sorted by start; ``reach``: the latest end of any window
 * starting at or before each) that holds ``ts``, or ``outside``: launches._Windows.index */
static long long window_of(long long ts, const long long *starts, const long long *ends,
                           const long long *reach, Py_ssize_t n, long long outside) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {  /* bisect_right(starts, ts) */
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (ts < starts[mid]) hi = mid;
        else lo = mid + 1;
    }
    for (Py_ssize_t k = lo - 1; k >= 0 && reach[k] > ts; k--)
        if (ts < ends[k]) return k;
    return outside;
}

/* launch_runs(ids, times, starts, ends, outside) -> (firsts, lasts, steps) as bytes of int64, int64
 * and int32, or None where ``ids`` are not in order: launches._Runs over the launches' steps by
 * their windows (launches.runs_by_rule, the rule; tests/readers/test_kineto_scan.py holds this to
 * it). ``ids`` and ``times``: buffers of int64 (array "q"); ``starts`` and ``ends``: the windows'. */
static PyObject *launch_runs(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 5) {
        PyErr_SetString(PyExc_TypeError, "launch_runs(ids, times, starts, ends, outside)");
        return NULL;
    }
    Py_buffer b[4] = {{0}};
    int got = 0;
    PyObject *result = NULL;
    long long *firsts = NULL, *lasts = NULL, *reach = NULL;
    int *steps = NULL;
    long long outside = PyLong_AsLongLong(argv[4]);
    if (outside == -1 && PyErr_Occurred()) return NULL;
    for (; got < 4; got++) {
        if (PyObject_GetBuffer(argv[got], &b[got], PyBUF_FORMAT) < 0) goto done;
        if (b[got].itemsize != 8 || !b[got].format || strcmp(b[got].format, "q")) {
            got++;
            PyErr_SetString(PyExc_TypeError, "launch_runs: ids, times, starts and ends are arrays of \"q\"");
            goto done;
        }
    }
    const long long *ids = b[0].buf, *times = b[1].buf, *starts = b[2].buf, *ends = b[3].buf;
    Py_ssize_t n = b[0].len / 8, windows = b[2].len / 8;
    if (b[1].len != b[0].len || b[3].len != b[2].len) {
        PyErr_SetString(PyExc_ValueError, "launch_runs: ids and times, starts and ends, of one length each");
        goto done;
    }
    for (Py_ssize_t i = 1; i < n; i++)
        if (ids[i - 1] > ids[i]) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    firsts = PyMem_Malloc((n + 1) * sizeof *firsts);
    lasts = PyMem_Malloc((n + 1) * sizeof *lasts);
    steps = PyMem_Malloc((n + 1) * sizeof *steps);
    reach = PyMem_Malloc((windows + 1) * sizeof *reach);
    if (!firsts || !lasts || !steps || !reach) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < windows; k++) reach[k] = k && reach[k - 1] > ends[k] ? reach[k - 1] : ends[k];
    Py_ssize_t runs = 0;
    long long last_step = 0, last = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long step = window_of(times[i], starts, ends, reach, windows, outside);
        if (runs && step == last_step) {
            lasts[runs - 1] = ids[i];
        } else if (!i || ids[i] != last) {  /* an id given twice: its first launch counts */
            firsts[runs] = lasts[runs] = ids[i];
            steps[runs++] = (int)step;
            last_step = step;
        }
        last = ids[i];
    }
    result = Py_BuildValue("(NNN)", as_bytes(firsts, runs * sizeof *firsts),
                           as_bytes(lasts, runs * sizeof *lasts), as_bytes(steps, runs * sizeof *steps));
done:
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    PyMem_Free(firsts);
    PyMem_Free(lasts);
    PyMem_Free(steps);
    PyMem_Free(reach);
    return result;
}

PyMethodDef SURVEY_METHODS[] = {
    {"survey", (PyCFunction)(void (*)(void))survey, METH_FASTCALL,
     "survey(events, launch_cats, op_cats, comm_ops, graph_launches, offset, thread_index, graphs, op, launch) "
     "-> (ids, times, threads): launches.Survey.add of a RawEvents"},
    {"launch_runs", (PyCFunction)(void (*)(void))launch_runs, METH_FASTCALL,
     "launch_runs(ids, times, starts, ends, outside) -> (firsts, lasts, steps) as bytes, or None where ids are "
     "not in order: launches._Runs of the launches' steps"},
    {"any_named", (PyCFunction)(void (*)(void))any_named, METH_FASTCALL,
     "any_named(events, cats, prefixes) -> bool: an event of one of cats named with one of prefixes"},
    {NULL, NULL, 0, NULL},
};
