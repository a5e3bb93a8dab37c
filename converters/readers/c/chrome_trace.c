/* chrome_trace.Records.read_batches in C: the common events of a batch (a list of events.Event, or
 * RawEvents: events.c) to records (read_events), or, in the spill pass, packed under their steps
 * as they are read (read_events' by_step: pack_made, spill.c's packing); the first pass's names and
 * possible steps (steps_and_names); Kineto's device work and launches among the events (kineto.InC).
 * Times and the few args read from raw text are values.c's.
 * Each routine names the Python rule it copies; an event they cannot read as it says is left to
 * that Python (``python``, Records._event), so the records are the ones Python makes
 * (tests/readers/test_chrome_trace.py holds the C to the rules). */
#include "core.h"

#include <structmember.h>
#include <math.h>
#include <string.h>

/* An event's field, as event.<name> gives it (a new reference). Events are msgspec Structs, whose
 * fields are slots at fixed offsets: read there, not through getattr's type lookup (a twentieth
 * of a summary conversion), for the last event type seen; anything else takes getattr. */
static PyObject **const FIELD_NAMES[N_FIELDS] = {&S_ph, &S_name, &S_pid, &S_tid, &S_ts, &S_dur, &S_cat, &S_id, &S_args};
static PyTypeObject *FIELDS_TYPE;  /* a strong reference: its offsets are below */
static Py_ssize_t FIELD_OFFSETS[N_FIELDS];

static void learn_fields(PyTypeObject *type) {
    for (int f = 0; f < N_FIELDS; f++) {
        PyObject *d = _PyType_Lookup(type, *FIELD_NAMES[f]);  /* borrowed, sets no error */
        PyMemberDef *m = d && Py_IS_TYPE(d, &PyMemberDescr_Type) ? ((PyMemberDescrObject *)d)->d_member : NULL;
        FIELD_OFFSETS[f] = m && m->type == T_OBJECT_EX && !(m->flags & PY_AUDIT_READ) ? m->offset : -1;
    }
    Py_INCREF(type);
    Py_XSETREF(FIELDS_TYPE, type);
}

static PyObject *slot_field(PyObject *event, int f) {
    if (Py_TYPE(event) != FIELDS_TYPE) learn_fields(Py_TYPE(event));
    if (FIELD_OFFSETS[f] >= 0) {
        PyObject *value = *(PyObject **)((char *)event + FIELD_OFFSETS[f]);
        if (value) return Py_NewRef(value);
    }
    return PyObject_GetAttr(event, *FIELD_NAMES[f]);
}

/* -- one event, scanned or decoded ------------------------------------------------------------ */

typedef struct { PyObject *obj; const RawEvents *raw; const RawEvent *e; } Ev;  /* obj, or raw's e */

static PyObject *field(const Ev *ev, int f) {
    return ev->obj ? slot_field(ev->obj, f) : span_value(ev->raw, &ev->e->f[f], f);
}

/* The event as an object: the Event, for Python's rules */
static PyObject *event_object(const Ev *ev) {
    return ev->obj ? Py_NewRef(ev->obj) : raw_event(ev->raw, ev->e - ev->raw->events);
}

/* The text of a scanned field that is a plain string, or NULL */
static const char *plain_str(const Ev *ev, int f, Py_ssize_t *n) {
    if (ev->obj || ev->e->f[f].kind != K_STR) return NULL;
    *n = ev->e->f[f].len - 2;
    return span_text(ev->raw, &ev->e->f[f]) + 1;
}

static int is(PyObject *text, PyObject *interned) {
    return text == interned || (PyUnicode_CheckExact(text) && PyUnicode_Compare(text, interned) == 0);
}

/* 1 if the field is a str equal to ``interned``, 0 if not, -1 on error */
static int field_is(const Ev *ev, int f, PyObject *interned) {
    Py_ssize_t n;
    const char *text = plain_str(ev, f, &n);
    if (text) return n == PyUnicode_GET_LENGTH(interned) && !memcmp(text, PyUnicode_DATA(interned), n);
    PyObject *value = field(ev, f);
    if (!value) return -1;
    int found = is(value, interned);
    Py_DECREF(value);
    return found;
}

/* 1 if the name is a str starting "ProfilerStep#", 0 if a str that does not, 2 if no str, -1 error */
static int step_name(const Ev *ev) {
    Py_ssize_t n;
    const char *text = plain_str(ev, F_NAME, &n);
    if (text) return n >= 13 && !memcmp(text, "ProfilerStep#", 13);
    PyObject *name = field(ev, F_NAME);
    if (!name) return -1;
    int found = PyUnicode_CheckExact(name) ? PyUnicode_Tailmatch(name, S_STEP_PREFIX, 0, PY_SSIZE_T_MAX, -1) : 2;
    Py_DECREF(name);
    return found;
}

/* 1 if the name is a str holding ``marker`` (its UTF-8 ``text``, ``n`` bytes), 0 if not, -1 on error:
 * the events that may be a user's step marker (Dialect.marks_step decides) */
static int name_holds(const Ev *ev, PyObject *marker, const char *text, Py_ssize_t n) {
    Py_ssize_t length;
    const char *name = plain_str(ev, F_NAME, &length);  /* plain: no escapes, its UTF-8 as written */
    if (name) {
        for (Py_ssize_t at = 0; at + n <= length; at++)
            if (name[at] == text[0] && !memcmp(name + at, text, n)) return 1;
        return 0;
    }
    PyObject *value = field(ev, F_NAME);
    if (!value) return -1;
    Py_ssize_t found = PyUnicode_CheckExact(value) ? PyUnicode_Find(value, marker, 0, PY_SSIZE_T_MAX, 1) : -1;
    Py_DECREF(value);
    return found == -2 ? -1 : found >= 0;
}

/* The event's phase: 'M', 'X', 's', 'f', 't', 'C', or 'i' for an instant ("i" or "I", which
 * Records._event reads as an "X" of no length: PyTorch's [memory] events); 0 for any other; -1 on error */
static int phase(const Ev *ev) {
    Py_ssize_t n;
    const char *text = plain_str(ev, F_PH, &n);
    if (text) return n != 1 || !strchr("MXsftCiI", text[0]) ? 0 : text[0] == 'I' ? 'i' : text[0];
    PyObject *ph = field(ev, F_PH);
    if (!ph) return -1;
    int found = is(ph, S_M) ? 'M' : is(ph, S_X) ? 'X' : is(ph, S_s) ? 's' : is(ph, S_f) ? 'f' : is(ph, S_t) ? 't'
              : is(ph, S_C) ? 'C' : 0;
    if (!found && PyUnicode_CheckExact(ph) && PyUnicode_GET_LENGTH(ph) == 1) {
        Py_UCS4 c = PyUnicode_READ_CHAR(ph, 0);
        found = c == 'i' || c == 'I' ? 'i' : 0;
    }
    Py_DECREF(ph);
    return found;
}

/* Whether a time (after the rank's clock offset) is one the model holds: within ±2**62 ns
 * (model.TIME_LIMIT_NS); Python says why another is left out */
static inline int model_time(long long ns) { return ns > -TIME_LIMIT_NS && ns < TIME_LIMIT_NS; }

/* A time field in ns: 1 (and *ns), 0 if Python's rules must read it, -1 on error */
static int event_ns(const Ev *ev, int f, long long *ns) {
    int ok = 0;
    if (ev->obj) {
        PyObject *us = field(ev, f);
        if (!us) return -1;
        *ns = fast_ns(us, &ok);
        Py_DECREF(us);
        return ok;
    }
    return span_ns(ev->raw, &ev->e->f[f], f, ns);  /* Kineto's floats read by their text (values.c) */
}

/* What read_events remembers within a batch: the routes of scanned (pid, tid) texts (borrowed
 * from Records._routes, forgotten whenever Python runs), the events left out by (reason, pid
 * text) before they are counted in Records._unread, and the task types met (with whether they
 * compute), so a summary makes no object for what it leaves out. */
#define ROUTE_SLOTS 128
typedef struct { const char *pid, *tid; uint32_t pid_len, tid_len, generation; uint8_t pid_kind, tid_kind; PyObject *kind, *lane; } RouteSlot;
#define LEFT_SLOTS 32
typedef struct { int reason; Span pid; long long count; } LeftSlot;
#define TASK_SLOTS 32
typedef struct { char text[32]; Py_ssize_t n; PyObject *task; int compute; } TaskSlot;  /* compute -1: not asked */
#define NAME_SLOTS 4096  /* direct-mapped: a real torch_npu step has ~1,000 names (Python frames), which 1024 slots thrash */
typedef struct { const char *text; Py_ssize_t n; PyObject *name; } NameSlot;

/* A scanned counter's lane ("<process> <name> [<key>]", counter_name's), remembered by the text of
 * its pid, name and key: torch_npu writes 44% of its events as counters, on a few dozen lanes, and
 * each made its name and lane anew (two str formatted a sample), then compared by text where
 * they are sorted and run by lane (_layout.counter_values), and spilled each one's text */
#define LANE_SLOTS 256
typedef struct {
    const char *pid, *name, *key;
    uint32_t pid_len, name_len, key_len, generation;
    uint8_t pid_kind;
    PyObject *lane;
} LaneSlot;

typedef struct { Made *at; Py_ssize_t n, cap; } MadeList;

/* kineto.InC read once a batch: its categories (by their text), and the launches' arrays as buffers */
#define KINETO_CATS 16
typedef struct { const char *text; Py_ssize_t n; int launch, kernel, computes; PyObject *shown, *prefix; } KinetoCat;
typedef struct Kineto {
    int n_cats, launches;
    KinetoCat cats[KINETO_CATS];
    PyObject *stream, *communicates, *learn, *graphs, *replayed, *launched, *flows;  /* borrowed from InC */
    PyObject *stream_lanes, *stream_lane;
    Py_buffer firsts, lasts, steps, collectives;  /* .obj NULL where absent */
    PyObject *list;  /* launched[list_step], the list the last record filed by its launch went to */
    long long list_step;
} Kineto;

typedef struct {
    PyObject *routes, *rank, *layer_type, *host, *stream, *slice_type, *flow_end_type, *sample_type, *out;
    MadeList *filed;  /* where records go to be packed by step (read_events' ``by_step``), or NULL: to ``out`` */
    PyObject *processes;  /* process names by pid (Records._processes), for counters */
    PyObject *unread, *reasons, *is_compute;  /* what is left out, counted by (reason: LEFT_OUT_*, pid) */
    PyObject *python_cats;  /* a set of categories whose events Python reads, or NULL */
    PyObject *host_tasks;   /* a host event's task type by its category (ReadContext.host_tasks), or NULL */
    long long offset;
    int detail, saw_device;
    const RawEvents *raw;
    uint32_t generation;
    RouteSlot routes_seen[ROUTE_SLOTS];
    LeftSlot left[LEFT_SLOTS];
    int n_left, n_tasks;
    TaskSlot tasks[TASK_SLOTS];
    struct Kineto *kineto;  /* the dialect's rules for its own events C reads (kineto.InC), or NULL */
    NameSlot names[NAME_SLOTS];  /* by a hash of their text */
    LaneSlot lanes[LANE_SLOTS];  /* by a hash of their pid, name and key; forgotten whenever Python runs */
} Batch;

/* unread[reason, pid] += count: 0, or -1 on error */
#define LEFT_OUT_DIALECT LEFT_OUT_FIELDS  /* the dialect's own reason: kineto.InC.flows */
static int count_unread(Batch *b, int reason, PyObject *pid, long long count) {
    PyObject *why = reason == LEFT_OUT_DIALECT ? b->kineto->flows : PyTuple_GET_ITEM(b->reasons, reason);
    PyObject *key = PyTuple_Pack(2, why, pid);
    if (!key) return -1;
    PyObject *known = PyDict_GetItemWithError(b->unread, key), *more = NULL;  /* a Counter: 0 if absent */
    long long n = known ? PyLong_AsLongLong(known) : 0;
    if (!PyErr_Occurred()) more = PyLong_FromLongLong(n + count);
    int rc = more ? PyDict_SetItem(b->unread, key, more) : -1;
    Py_XDECREF(more);
    Py_DECREF(key);
    return rc;
}

/* The counts of scanned events left out, into Records._unread, in the order first met */
static int flush_left(Batch *b) {
    int rc = 0;
    for (int i = 0; i < b->n_left && !rc; i++) {
        PyObject *pid = span_value(b->raw, &b->left[i].pid, F_PID);
        rc = pid ? count_unread(b, b->left[i].reason, pid, b->left[i].count) : -1;
        Py_XDECREF(pid);
    }
    b->n_left = 0;
    return rc;
}

static int same_text(const RawEvents *r, const Span *a, const Span *b) {
    return a->kind == b->kind && a->len == b->len && !memcmp(span_text(r, a), span_text(r, b), a->len);
}

/* unread[reason, event.pid] += 1: 1, or -1 on error */
static int left_out(Batch *b, int reason, const Ev *ev) {
    if (ev->obj) {
        PyObject *pid = field(ev, F_PID);
        int rc = pid ? count_unread(b, reason, pid, 1) : -1;
        Py_XDECREF(pid);
        return rc < 0 ? -1 : 1;
    }
    const Span *pid = &ev->e->f[F_PID];
    for (int i = 0; i < b->n_left; i++)
        if (b->left[i].reason == reason && same_text(b->raw, &b->left[i].pid, pid)) {
            b->left[i].count++;
            return 1;
        }
    if (b->n_left == LEFT_SLOTS && flush_left(b) < 0) return -1;
    b->left[b->n_left++] = (LeftSlot){reason, *pid, 1};
    return 1;
}

static void made_clear(Made *m) {
    Py_XDECREF(m->layer); Py_XDECREF(m->lane); Py_XDECREF(m->name); Py_XDECREF(m->task); Py_XDECREF(m->args);
    Py_XDECREF(m->record);
}

/* The NamedTuple of a record made in C, as the reader's rules make it (a new reference) */
static PyObject *made_record(Batch *b, const Made *m) {
    if (m->tag == P_SLICE) {
        PyObject *args = m->args ? Py_NewRef(m->args) : m->text ? PyBytes_FromStringAndSize(m->text, m->text_len) :
                         Py_NewRef(Py_None);
        PyObject *items[SLICE_FIELDS] = {
            [SLICE_RANK] = Py_NewRef(b->rank), [SLICE_LAYER] = Py_NewRef(m->layer), [SLICE_LANE] = Py_NewRef(m->lane),
            [SLICE_NAME] = Py_NewRef(m->name), [SLICE_START_NS] = PyLong_FromLongLong(m->start),
            [SLICE_DUR_NS] = PyLong_FromLongLong(m->dur), [SLICE_ARGS] = args, [SLICE_TASK_TYPE] = Py_NewRef(m->task),
            [SLICE_FLOWS_OUT] = Py_NewRef(EMPTY_TUPLE), [SLICE_FLOWS_IN] = Py_NewRef(EMPTY_TUPLE)};
        return record(b->slice_type, items, SLICE_FIELDS);
    }
    if (m->tag == P_SAMPLE) {
        PyObject *items[SAMPLE_FIELDS] = {
            [SAMPLE_RANK] = Py_NewRef(b->rank), [SAMPLE_LANE] = Py_NewRef(m->lane),
            [SAMPLE_START_NS] = PyLong_FromLongLong(m->start), [SAMPLE_VALUE] = PyFloat_FromDouble(m->value)};
        return record(b->sample_type, items, SAMPLE_FIELDS);
    }
    if (m->tag == P_FLOW_END) {
        PyObject *items[FLOW_END_FIELDS] = {
            [FLOW_END_RANK] = Py_NewRef(b->rank), [FLOW_END_LAYER] = Py_NewRef(m->layer),
            [FLOW_END_LANE] = Py_NewRef(m->lane), [FLOW_END_START_NS] = PyLong_FromLongLong(m->start),
            [FLOW_END_KEY] = Py_NewRef(m->name), [FLOW_END_STARTS] = PyBool_FromLong(m->starts)};
        return record(b->flow_end_type, items, FLOW_END_FIELDS);
    }
    return Py_NewRef(m->record);
}

/* A record made: onto ``filed`` (which takes its references), or as its NamedTuple onto ``out``.
 * 0, or -1 on error; its references are taken either way. */
static int emit(Batch *b, Made *m) {
    MadeList *list = b->filed;
    if (list && list->n == list->cap) {
        Py_ssize_t cap = list->cap ? list->cap * 2 : 1024;
        Made *at = PyMem_Realloc(list->at, cap * sizeof(Made));
        if (!at) { made_clear(m); PyErr_NoMemory(); return -1; }
        list->at = at;
        list->cap = cap;
    }
    if (list) {
        list->at[list->n++] = *m;
        return 0;
    }
    PyObject *made = made_record(b, m);
    made_clear(m);
    int rc = made ? PyList_Append(b->out, made) : -1;
    Py_XDECREF(made);
    return rc;
}

static uint32_t text_hash(const char *text, uint32_t n, uint32_t h) {
    for (uint32_t i = 0; i < n; i++) h = (h ^ (unsigned char)text[i]) * 16777619u;
    return h;
}

/* The remembered route of a scanned event's (pid, tid), or the free slot it would take, or NULL */
static RouteSlot *route_slot(Batch *b, const Ev *ev) {
    const Span *pid = &ev->e->f[F_PID], *tid = &ev->e->f[F_TID];
    const char *pid_text = span_text(b->raw, pid), *tid_text = span_text(b->raw, tid);
    uint32_t h = text_hash(tid_text, tid->len, text_hash(pid_text, pid->len, 2166136261u + pid->kind * 7 + tid->kind));
    for (int k = 0; k < 8; k++) {
        RouteSlot *slot = &b->routes_seen[(h + k) % ROUTE_SLOTS];
        if (slot->generation != b->generation) return slot;
        if (slot->pid_kind == pid->kind && slot->tid_kind == tid->kind && slot->pid_len == pid->len &&
            slot->tid_len == tid->len && !memcmp(slot->pid, pid_text, pid->len) && !memcmp(slot->tid, tid_text, tid->len))
            return slot;
    }
    return NULL;
}

/* The event's route (kind, lane) if known and to a layer or skipped (kind None): borrowed
 * items, else 0 */
static int route_of(Batch *b, const Ev *ev, PyObject **kind, PyObject **lane) {
    RouteSlot *slot = ev->obj ? NULL : route_slot(b, ev);
    if (slot && slot->generation == b->generation) {
        *kind = slot->kind;
        *lane = slot->lane;
        return 1;
    }
    PyObject *pid = field(ev, F_PID), *tid = pid ? field(ev, F_TID) : NULL;
    PyObject *key = tid ? PyTuple_Pack(2, pid, tid) : NULL;
    Py_XDECREF(pid); Py_XDECREF(tid);
    if (!key) return -1;
    PyObject *route = PyDict_GetItemWithError(b->routes, key);  /* borrowed */
    Py_DECREF(key);
    if (!route) return PyErr_Occurred() ? -1 : 0;
    if (!PyTuple_Check(route) || PyTuple_GET_SIZE(route) != ROUTE_FIELDS) return 0;
    *kind = PyTuple_GET_ITEM(route, ROUTE_KIND);
    *lane = PyTuple_GET_ITEM(route, ROUTE_LANE);
    int known = *kind == Py_None || ((Py_TYPE(*kind) == (PyTypeObject *)b->layer_type ||
                                      (b->kineto && *kind == b->kineto->stream)) && PyUnicode_CheckExact(*lane));
    if (known && slot) {
        const Span *p = &ev->e->f[F_PID], *t = &ev->e->f[F_TID];
        *slot = (RouteSlot){span_text(b->raw, p), span_text(b->raw, t), p->len, t->len, b->generation,
                            p->kind, t->kind, *kind, *lane};
    }
    return known;
}

/* The event's name (a new reference): a plain one is made once a batch and shared by its records,
 * so there are fewer objects to make, pack, unpack and free (a torch_npu rank: 570 names among
 * 350,000 slices), and the spill writes it as a number after its first time */
static PyObject *event_name(Batch *b, const Ev *ev) {
    Py_ssize_t n;
    const char *text = plain_str(ev, F_NAME, &n);
    if (!text) return field(ev, F_NAME);
    NameSlot *slot = &b->names[text_hash(text, (uint32_t)n, 2166136261u) % NAME_SLOTS];
    if (slot->name && slot->n == n && !memcmp(slot->text, text, n)) return Py_NewRef(slot->name);
    PyObject *name = field(ev, F_NAME);
    if (name && PyUnicode_CheckExact(name)) {
        Py_XSETREF(slot->name, Py_NewRef(name));
        slot->text = text;
        slot->n = n;
    }
    return name;
}

/* 1 if the dialect reads events of this event's category in Python, 0 if not, -1 on error */
static int python_cat(Batch *b, const Ev *ev) {
    if (!b->python_cats) return 0;
    PyObject *cat = field(ev, F_CAT);
    if (!cat) return -1;
    int found = PyUnicode_CheckExact(cat) ? PySet_Contains(b->python_cats, cat) : 0;
    Py_DECREF(cat);
    return found;
}

/* The task type of a device task's args (raw JSON): its slot (remembered), or NULL to leave the
 * event to Python (none found as plain text); -1 in *error on error */
static TaskSlot *task_of(Batch *b, const char *args, Py_ssize_t length, TaskSlot *spare, int *error) {
    Py_ssize_t n;
    const char *text = task_type_in(args, length, &n);
    if (!text) return NULL;
    for (int i = 0; i < b->n_tasks; i++)
        if (b->tasks[i].n == n && !memcmp(b->tasks[i].text, text, n)) return &b->tasks[i];
    TaskSlot *slot = n <= (Py_ssize_t)sizeof(spare->text) && b->n_tasks < TASK_SLOTS ? &b->tasks[b->n_tasks] : spare;
    if (!(slot->task = PyUnicode_DecodeUTF8(text, n, "replace"))) {
        *error = -1;
        return NULL;
    }
    slot->compute = -1;
    if (slot != spare) {
        memcpy(slot->text, text, n);
        slot->n = n;
        b->n_tasks++;
    }
    return slot;
}

/* 1 if the slot's task type computes, 0 if not, -1 on error */
static int computes(Batch *b, TaskSlot *slot) {
    if (slot->compute < 0) {
        PyObject *answer = PyObject_CallOneArg(b->is_compute, slot->task);
        slot->compute = answer ? PyObject_IsTrue(answer) : -1;
        Py_XDECREF(answer);
    }
    return slot->compute;
}

/* An event's args as raw JSON text (``*text``, ``*length`` bytes; none: 0): its scanned span, or the
 * bytes of its Event (``*args``, ``*view``: the caller releases them). 1; 0 for Python's rules, where
 * the args are not raw and not empty; -1 on error */
static int raw_args(const Ev *ev, PyObject **args, Py_buffer *view, const char **text, Py_ssize_t *length) {
    *text = NULL;
    *length = 0;
    if (!ev->obj) {
        if (ev->e->f[F_ARGS].kind != K_ABSENT) {
            *text = span_text(ev->raw, &ev->e->f[F_ARGS]);
            *length = ev->e->f[F_ARGS].len;
        }
        return 1;
    }
    if (!(*args = field(ev, F_ARGS))) return -1;
    if (PyObject_GetBuffer(*args, view, PyBUF_SIMPLE) == 0) {
        *text = view->buf;
        *length = view->len;
        return 1;
    }
    PyErr_Clear();
    int truth = PyObject_IsTrue(*args);
    if (!truth) return 1;
    Py_CLEAR(*args);
    return truth < 0 ? -1 : 0;
}

/* -- Kineto's device work and launches (kineto.Kineto.convert) ----------------------------------- */

/* The index in ``a`` (int64, sorted) of the last item <= x, or -1 */
static Py_ssize_t last_at_most(const Py_buffer *a, long long x) {
    const long long *v = a->buf;
    Py_ssize_t lo = 0, hi = a->len / (Py_ssize_t)sizeof(long long);
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (v[mid] <= x) lo = mid + 1; else hi = mid;
    }
    return lo - 1;
}

/* Launches.step: the index of the step that launched ``correlation`` (OUTSIDE, -1, where none did) */
static long long kineto_step(const Kineto *k, long long correlation) {
    Py_ssize_t at = last_at_most(&k->firsts, correlation);
    if (at < 0 || correlation > ((const long long *)k->lasts.buf)[at]) return -1;
    return ((const int *)k->steps.buf)[at];
}

/* Whether Launches.collective finds a communication op that launched ``correlation`` */
static int kineto_collective(const Kineto *k, long long correlation) {
    Py_ssize_t at = last_at_most(&k->collectives, correlation);
    return at >= 0 && ((const long long *)k->collectives.buf)[at] == correlation;
}

/* Launches.ran: 0, or -1 on error */
static int kineto_ran(Kineto *k, long long correlation) {
    if (!PySet_GET_SIZE(k->graphs)) return 0;
    PyObject *id = PyLong_FromLongLong(correlation);
    if (!id) return -1;
    int in = PySet_Contains(k->graphs, id);
    int rc = in > 0 ? PySet_Add(k->replayed, id) : in;
    Py_DECREF(id);
    return rc;
}

/* Whether a kernel's name communicates (kineto._communication), asked of Python once a name: 1, 0, -1 */
static int kineto_communicates(Kineto *k, PyObject *name) {
    PyObject *known = PyDict_GetItemWithError(k->communicates, name);  /* borrowed */
    if (known) return PyObject_IsTrue(known);
    if (PyErr_Occurred()) return -1;
    PyObject *answer = PyObject_CallOneArg(k->learn, name);
    int rc = answer ? PyObject_IsTrue(answer) : -1;
    Py_XDECREF(answer);
    return rc;
}

/* The lane of device work on a thread its route calls the host's (no metadata names it a stream):
 * kineto.InC.stream_lane(pid, tid), made once a (pid, tid) into InC.stream_lanes. A new reference;
 * NULL with no error where it is not a str (Python's rules say what it is) */
static PyObject *kineto_stream_lane(Kineto *k, const Ev *ev) {
    PyObject *pid = field(ev, F_PID), *tid = pid ? field(ev, F_TID) : NULL;
    PyObject *key = tid ? PyTuple_Pack(2, pid, tid) : NULL;
    Py_XDECREF(pid);
    Py_XDECREF(tid);
    if (!key) return NULL;
    PyObject *lane = PyDict_GetItemWithError(k->stream_lanes, key);  /* borrowed */
    if (lane) {
        Py_INCREF(lane);
    } else if (!PyErr_Occurred() && (lane = PyObject_Call(k->stream_lane, key, NULL)) &&
               (!PyUnicode_CheckExact(lane) || PyDict_SetItem(k->stream_lanes, key, lane) < 0)) {
        Py_CLEAR(lane);
    }
    Py_DECREF(key);
    return lane;
}

/* A record filed by its launch (Converted.step): onto Records.launched[step], in the file's order */
static int kineto_file(Batch *b, long long step, Made *m) {
    Kineto *k = b->kineto;
    PyObject *made = made_record(b, m);
    made_clear(m);
    if (!made) return -1;
    if (!k->list || k->list_step != step) {
        PyObject *at = PyLong_FromLongLong(step);
        PyObject *list = at ? PyObject_GetItem(k->launched, at) : NULL;  /* a defaultdict(list) */
        Py_XDECREF(at);
        if (!list || !PyList_CheckExact(list)) {
            if (list) PyErr_SetString(PyExc_TypeError, "Records.launched holds lists");
            Py_XDECREF(list);
            Py_DECREF(made);
            return -1;
        }
        Py_XSETREF(k->list, list);
        k->list_step = step;
    }
    int rc = PyList_Append(k->list, made);
    Py_DECREF(made);
    return rc;
}

/* The args of a device record as Records._complete gives them: its "Task Type" first
 * (chrome_trace._with_task_type: ``prefix`` is '{"Task Type":"KERNEL"'); NULL with no error where
 * they hold one already (Python's rules) */
static PyObject *with_task_type(PyObject *prefix, const char *args, Py_ssize_t length) {
    if (!length) {
        args = "{}";
        length = 2;
    }
    static const char name[] = "\"Task Type\"";
    for (const char *p = args; p + sizeof(name) - 1 <= args + length; p++)
        if (*p == '"' && !memcmp(p, name, sizeof(name) - 1)) return NULL;
    const char *body = past_space(args + 1, args + length);
    Py_ssize_t n = PyBytes_GET_SIZE(prefix), rest = args + length - body, comma = *body != '}';
    PyObject *out = PyBytes_FromStringAndSize(NULL, n + comma + rest);
    if (!out) return NULL;
    char *at = PyBytes_AS_STRING(out);
    memcpy(at, PyBytes_AS_STRING(prefix), n);
    if (comma) at[n] = ',';
    memcpy(at + n + comma, body, rest);
    return out;
}

/* The category of the event among kineto.InC.cats, or NULL; -1 in *error on error */
static const KinetoCat *kineto_cat(const Kineto *k, const Ev *ev, int *error) {
    Py_ssize_t n;
    const char *text = plain_str(ev, F_CAT, &n);
    PyObject *cat = NULL;
    if (!text) {
        if (!(cat = field(ev, F_CAT))) { *error = -1; return NULL; }
        if (PyUnicode_CheckExact(cat) && PyUnicode_IS_COMPACT_ASCII(cat)) {
            text = PyUnicode_DATA(cat);
            n = PyUnicode_GET_LENGTH(cat);
        }
    }
    const KinetoCat *found = NULL;
    for (int i = 0; text && i < k->n_cats && !found; i++)
        if (k->cats[i].n == n && !memcmp(k->cats[i].text, text, n)) found = &k->cats[i];
    Py_XDECREF(cat);
    return found;
}

/* A Kineto kernel, memcpy or memset on its stream, or a launch on its thread, as Kineto.convert and
 * Records._complete make them: a Slice (a device one's args its "Task Type" first, its task type what
 * it does), the arrow end of its correlation id, a device one filed under the step that launched it.
 * 1 done, 0 Python's, 2 not such an event (the common rules), -1 error */
static int kineto_complete(Batch *b, const Ev *ev, PyObject *kind, PyObject *lane) {
    Kineto *k = b->kineto;
    int error = 0, result = 0;
    const KinetoCat *cat = kineto_cat(k, ev, &error);
    if (error || !cat) return error ? -1 : 2;
    int launch = cat->launch;
    PyObject *args = NULL, *name = NULL, *made_args = NULL, *own_lane = NULL;
    if (kind != (launch ? b->host : k->stream)) {  /* a launch on a stream, an MTIA's: Python's */
        if (launch || kind != b->host) return 0;
        if (!(own_lane = kineto_stream_lane(k, ev))) return PyErr_Occurred() ? -1 : 0;
        lane = own_lane;  /* device work on an unnamed thread: drawn on its stream, as convert does */
    }
    Py_buffer view = {.obj = NULL};
    const char *text = NULL;
    Py_ssize_t length = 0;
    if ((result = raw_args(ev, &args, &view, &text, &length)) <= 0) goto done;
    result = 0;
    if (length && text[0] != '{') goto done;  /* no object: Python's warning */
    if (launch && !b->detail) { result = left_out(b, LEFT_OUT_HOST, ev); goto done; }
    long long correlation = 0, start, dur, step = -2;  /* -2: filed by its time */
    int has = 2;
    if (length && !(has = correlation_in(text, length, &correlation))) goto done;
    has = has == 1;
    if (!(name = event_name(b, ev))) { result = -1; goto done; }
    if (!PyUnicode_CheckExact(name)) goto done;  /* str() of it: Python's */
    if (!launch) {
        b->saw_device = 1;
        if (has && k->launches && kineto_ran(k, correlation) < 0) { result = -1; goto done; }
        if (cat->kernel) {
            int talks = kineto_communicates(k, name);
            if (talks) { result = talks < 0 ? -1 : 0; goto done; }  /* a communication op: Python's */
            if (has && k->collectives.obj && kineto_collective(k, correlation)) goto done;  /* _by_launch's */
        }
        if (has && k->firsts.obj) step = kineto_step(k, correlation);
        if (!b->detail && !cat->computes) { result = left_out(b, LEFT_OUT_TASKS, ev); goto done; }
    }
    if ((result = event_ns(ev, F_TS, &start)) <= 0 || (result = event_ns(ev, F_DUR, &dur)) <= 0) goto done;
    result = 0;
    if (dur < 0 || __builtin_add_overflow(start, b->offset, &start) || !model_time(start)) goto done;
    if (!launch && !(made_args = with_task_type(cat->prefix, text, length))) {
        result = PyErr_Occurred() ? -1 : 0;
        goto done;
    }
    PyObject *key = has && b->detail ? PyUnicode_FromFormat("launch:%lld", correlation) : NULL;
    if (has && b->detail && !key) { result = -1; goto done; }
    PyObject *layer = launch ? b->host : b->stream;
    Made slice = {.tag = P_SLICE, .layer = Py_NewRef(layer), .lane = Py_NewRef(lane), .name = Py_NewRef(name),
                  .task = Py_NewRef(launch ? EMPTY : cat->shown), .start = start, .dur = dur};
    if (launch) {
        slice.args = ev->obj ? (length ? Py_NewRef(args) : Py_NewRef(Py_None)) : NULL;
        slice.text = ev->obj || !length ? NULL : text;
        slice.text_len = length;
    } else {
        slice.args = made_args;
        made_args = NULL;
    }
    Made flow = {.tag = P_FLOW_END, .starts = (char)launch, .layer = Py_NewRef(layer), .lane = Py_NewRef(lane),
                 .name = key, .start = start};
    if (step == -2) {
        result = emit(b, &slice) < 0 ? -1 : 1;
        if (key) result = result < 0 ? (made_clear(&flow), -1) : emit(b, &flow) < 0 ? -1 : 1;
        else made_clear(&flow);
    } else {
        result = kineto_file(b, step, &slice) < 0 ? -1 : 1;
        if (key) result = result < 0 ? (made_clear(&flow), -1) : kineto_file(b, step, &flow) < 0 ? -1 : 1;
        else made_clear(&flow);
    }
done:
    if (view.obj) PyBuffer_Release(&view);
    Py_XDECREF(args);
    Py_XDECREF(name);
    Py_XDECREF(made_args);
    Py_XDECREF(own_lane);
    return result;
}

/* kineto.InC into ``k``: 0, or -1 (an error set) where it is not one */
static int kineto_rules(Kineto *k, PyObject *rules) {
    if (!PyTuple_Check(rules) || PyTuple_GET_SIZE(rules) != IN_C_FIELDS ||
        !PyTuple_Check(PyTuple_GET_ITEM(rules, IN_C_CATS)) ||
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(rules, IN_C_CATS)) > KINETO_CATS ||
        !PyDict_Check(PyTuple_GET_ITEM(rules, IN_C_COMMUNICATES)) || !PyAnySet_Check(PyTuple_GET_ITEM(rules, IN_C_GRAPHS)) ||
        !PyAnySet_Check(PyTuple_GET_ITEM(rules, IN_C_REPLAYED)) || !PyDict_Check(PyTuple_GET_ITEM(rules, IN_C_LAUNCHED)) ||
        !PyDict_Check(PyTuple_GET_ITEM(rules, IN_C_STREAM_LANES))) {
        PyErr_SetString(PyExc_TypeError, "read_events: context.dialect is a kineto.InC");
        return -1;
    }
    PyObject *cats = PyTuple_GET_ITEM(rules, IN_C_CATS);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(cats); i++) {
        PyObject *c = PyTuple_GET_ITEM(cats, i);
        if (!PyTuple_Check(c) || PyTuple_GET_SIZE(c) != IN_C_CAT_FIELDS ||
            !PyUnicode_CheckExact(PyTuple_GET_ITEM(c, IN_C_CAT_NAME)) ||
            !PyUnicode_CheckExact(PyTuple_GET_ITEM(c, IN_C_CAT_SHOWN)) ||
            !PyBytes_CheckExact(PyTuple_GET_ITEM(c, IN_C_CAT_PREFIX))) {
            PyErr_SetString(PyExc_TypeError, "read_events: kineto.InC.cats holds InCCat");
            return -1;
        }
        KinetoCat *at = &k->cats[k->n_cats++];
        at->text = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(c, IN_C_CAT_NAME), &at->n);
        at->launch = PyObject_IsTrue(PyTuple_GET_ITEM(c, IN_C_CAT_LAUNCH));
        at->kernel = PyObject_IsTrue(PyTuple_GET_ITEM(c, IN_C_CAT_KERNEL));
        at->computes = PyObject_IsTrue(PyTuple_GET_ITEM(c, IN_C_CAT_COMPUTES));
        at->shown = PyTuple_GET_ITEM(c, IN_C_CAT_SHOWN);
        at->prefix = PyTuple_GET_ITEM(c, IN_C_CAT_PREFIX);
        if (!at->text || at->launch < 0 || at->kernel < 0 || at->computes < 0) return -1;
    }
    k->stream = PyTuple_GET_ITEM(rules, IN_C_STREAM);
    k->communicates = PyTuple_GET_ITEM(rules, IN_C_COMMUNICATES);
    k->learn = PyTuple_GET_ITEM(rules, IN_C_LEARN);
    k->graphs = PyTuple_GET_ITEM(rules, IN_C_GRAPHS);
    k->replayed = PyTuple_GET_ITEM(rules, IN_C_REPLAYED);
    k->launched = PyTuple_GET_ITEM(rules, IN_C_LAUNCHED);
    k->flows = PyTuple_GET_ITEM(rules, IN_C_FLOWS);
    k->stream_lanes = PyTuple_GET_ITEM(rules, IN_C_STREAM_LANES);
    k->stream_lane = PyTuple_GET_ITEM(rules, IN_C_STREAM_LANE);
    k->launches = PyObject_IsTrue(PyTuple_GET_ITEM(rules, IN_C_LAUNCHES));
    static const struct { int at; Py_ssize_t item; } arrays[] = {
        {IN_C_FIRSTS, 8}, {IN_C_LASTS, 8}, {IN_C_STEPS, 4}, {IN_C_COLLECTIVES, 8}};
    Py_buffer *views[] = {&k->firsts, &k->lasts, &k->steps, &k->collectives};
    for (int i = 0; i < 4; i++) {
        PyObject *a = PyTuple_GET_ITEM(rules, arrays[i].at);
        if (a == Py_None) continue;
        if (PyObject_GetBuffer(a, views[i], PyBUF_FORMAT) < 0) return -1;
        if (views[i]->itemsize != arrays[i].item || views[i]->len % arrays[i].item) {
            PyErr_SetString(PyExc_TypeError, "read_events: kineto.InC's arrays are of int64 (steps: int32)");
            return -1;
        }
    }
    if (!k->firsts.obj != !k->lasts.obj || !k->firsts.obj != !k->steps.obj || k->firsts.len != k->lasts.len ||
        k->firsts.len / 8 != k->steps.len / 4) {
        PyErr_SetString(PyExc_TypeError, "read_events: kineto.InC's runs are three arrays of one length");
        return -1;
    }
    return k->launches < 0 ? -1 : 0;
}

static void kineto_release(Kineto *k) {
    Py_buffer *views[] = {&k->firsts, &k->lasts, &k->steps, &k->collectives};
    for (int i = 0; i < 4; i++)
        if (views[i]->obj) PyBuffer_Release(views[i]);
    Py_CLEAR(k->list);
}

/* An "X" event as Records._complete takes it: 1 done, 0 Python's, -1 error */
static int fast_complete(Batch *b, const Ev *ev) {
    PyObject *kind, *lane, *args = NULL, *name = NULL, *host_task = NULL;
    TaskSlot spare = {.task = NULL}, *task = NULL;
    int result = route_of(b, ev, &kind, &lane);
    if (result <= 0) return result;
    if (kind == Py_None) return left_out(b, LEFT_OUT_VENDOR, ev);
    if (b->kineto && (result = kineto_complete(b, ev, kind, lane)) != 2) return result;
    if (Py_TYPE(kind) != (PyTypeObject *)b->layer_type) return 0;  /* a dialect's own route: Python's */
    if ((result = python_cat(b, ev)) != 0) return result < 0 ? -1 : 0;
    int host = kind == b->host, step = step_name(ev);
    if (step < 0) return -1;
    if (step == 2 || (host && step)) return 0;  /* no str, or ProfilerStep#N: a step */
    const char *args_text = NULL;
    Py_ssize_t args_length = 0;
    Py_buffer view = {.obj = NULL};
    if ((result = raw_args(ev, &args, &view, &args_text, &args_length)) <= 0) goto done;
    result = 0;
    if (ev->obj && args_length && args_text[0] != '{') goto done;  /* no object: Python's */
    if (host && !b->detail) {  /* after the args: Python warns of args that are no object first */
        result = left_out(b, LEFT_OUT_HOST, ev);
        goto done;
    }
    if (!host) b->saw_device = 1;
    result = -1;
    if (host && b->host_tasks) {  /* a host event's task type by its category (Records._complete) */
        PyObject *cat = field(ev, F_CAT);
        host_task = cat ? PyObject_GetItem(b->host_tasks, cat) : NULL;
        Py_XDECREF(cat);
        if (!host_task) {
            if (!PyErr_ExceptionMatches(PyExc_KeyError)) goto done;
            PyErr_Clear();
        }
    }
    if (kind == b->stream) {
        int error = 0;
        if (args_length) task = task_of(b, args_text, args_length, &spare, &error);
        if (error) goto done;
        if (!task) { result = 0; goto done; }
        if (!b->detail) {  /* summary keeps compute tasks only */
            int compute = computes(b, task);
            if (compute <= 0) {
                result = compute < 0 ? -1 : left_out(b, LEFT_OUT_TASKS, ev);
                goto done;
            }
        }
    }
    long long start, length;
    if ((result = event_ns(ev, F_TS, &start)) <= 0 || (result = event_ns(ev, F_DUR, &length)) <= 0) goto done;
    result = 0;
    if (length < 0 || __builtin_add_overflow(start, b->offset, &start) || !model_time(start)) goto done;
    if (ev->obj && !args_length) Py_SETREF(args, Py_NewRef(Py_None));
    if (!(name = event_name(b, ev))) { result = -1; goto done; }
    Made m = {.tag = P_SLICE, .layer = Py_NewRef(kind), .lane = Py_NewRef(lane), .name = name,
              .task = host_task ? host_task : Py_NewRef(task ? task->task : EMPTY), .args = args,
              .text = ev->obj || !args_length ? NULL : args_text, .text_len = args_length, .start = start, .dur = length};
    name = args = host_task = NULL;  /* taken */
    result = emit(b, &m) < 0 ? -1 : 1;
done:
    if (view.obj) PyBuffer_Release(&view);
    Py_XDECREF(args);
    Py_XDECREF(host_task);
    Py_XDECREF(spare.task);
    return result;
}

/* A scanned flow event's key f"{cat}:{id}" made from its text, without a str for its cat and an int
 * for its id (torch_npu: 12% of its events are flows): where its cat is a plain ASCII str and its
 * id one too, or an int as JSON writes it (its text is then what str() gives, but for -0). 1 made
 * (``*key``), 0 not so, -1 error */
static int flow_key_of_text(const Ev *ev, PyObject **key) {
    if (ev->obj) return 0;
    const Span *cat = &ev->e->f[F_CAT], *id = &ev->e->f[F_ID];
    if (cat->kind != K_STR || (id->kind != K_STR && id->kind != K_INT)) return 0;
    const char *cat_text = span_text(ev->raw, cat) + 1, *id_text = span_text(ev->raw, id);
    Py_ssize_t cat_n = cat->len - 2, id_n = id->len;
    if (id->kind == K_STR) {
        id_text++;
        id_n -= 2;
    } else if (id_n > 18 || (id_n == 2 && !memcmp(id_text, "-0", 2))) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < cat_n; i++)
        if ((unsigned char)cat_text[i] >= 0x80) return 0;
    for (Py_ssize_t i = 0; i < id_n; i++)
        if ((unsigned char)id_text[i] >= 0x80) return 0;
    if (!(*key = PyUnicode_New(cat_n + 1 + id_n, 127))) return -1;
    char *at = (char *)PyUnicode_DATA(*key);
    memcpy(at, cat_text, cat_n);
    at[cat_n] = ':';
    memcpy(at + cat_n + 1, id_text, id_n);
    return 1;
}

/* A flow event as Records._flow_end makes it: 1 done, 0 Python's, -1 error */
static int fast_flow_end(Batch *b, const Ev *ev, int starts) {
    PyObject *kind, *lane, *cat = NULL, *id = NULL;
    int result = route_of(b, ev, &kind, &lane);
    if (result <= 0 || kind == Py_None) return result < 0 ? -1 : 0;
    if ((result = python_cat(b, ev)) != 0)  /* Kineto's: its arrows are drawn from correlation ids */
        return result < 0 ? -1 : b->kineto ? left_out(b, LEFT_OUT_DIALECT, ev) : 0;
    if (Py_TYPE(kind) != (PyTypeObject *)b->layer_type) return 0;
    long long at;
    if ((result = event_ns(ev, F_TS, &at)) <= 0) return result;
    if (__builtin_add_overflow(at, b->offset, &at) || !model_time(at)) return 0;
    PyObject *key = NULL;
    if ((result = flow_key_of_text(ev, &key)) < 0) return -1;
    if (result) goto made;
    result = -1;
    if (!(cat = field(ev, F_CAT)) || !(id = field(ev, F_ID))) goto done;
    result = 0;  /* the key is f"{cat}:{id}": str() gives the same for these types */
    if (!(cat == Py_None || PyUnicode_CheckExact(cat)) || !(PyUnicode_CheckExact(id) || PyLong_CheckExact(id)))
        goto done;
    key = PyUnicode_FromFormat("%S:%S", cat, id);
made:;
    Made m = {.tag = P_FLOW_END, .starts = (char)starts, .layer = Py_NewRef(kind), .lane = Py_NewRef(lane),
              .name = key, .start = at};
    result = !key ? (made_clear(&m), -1) : emit(b, &m) < 0 ? -1 : 1;
done:
    Py_XDECREF(cat); Py_XDECREF(id);
    return result;
}

/* The counter's name as Records._counter makes it: "<process> <name>" unless the name starts
 * with its process's; NULL with no error for Python's rules (a name that is no str) */
static PyObject *counter_name(Batch *b, const Ev *ev) {
    PyObject *name = field(ev, F_NAME), *pid = name ? field(ev, F_PID) : NULL;
    if (!pid) { Py_XDECREF(name); return NULL; }
    PyObject *process = PyUnicode_CheckExact(name) ? PyDict_GetItemWithError(b->processes, pid) : NULL;
    Py_DECREF(pid);
    if (!PyUnicode_CheckExact(name) || (!process && PyErr_Occurred())) { Py_DECREF(name); return NULL; }
    if (!process || !PyUnicode_CheckExact(process) || !PyUnicode_GET_LENGTH(process) ||
        PyUnicode_Tailmatch(name, process, 0, PY_SSIZE_T_MAX, -1))
        return name;
    PyObject *named = PyUnicode_FromFormat("%U %U", process, name);
    Py_DECREF(name);
    return named;
}

/* The slot of a counter's lane for its key (its ``lane`` NULL where not remembered, a slot it may
 * take), or NULL where it is not remembered: an Event, a name that is no plain str, the table full
 * where it would go */
static LaneSlot *lane_slot(Batch *b, const Ev *ev, const CounterArg *arg) {
    Py_ssize_t name_len;
    const char *name = plain_str(ev, F_NAME, &name_len);
    if (!name) return NULL;
    const Span *pid = &ev->e->f[F_PID];
    const char *pid_text = span_text(b->raw, pid);
    uint32_t h = text_hash(pid_text, pid->len, 2166136261u + pid->kind);
    h = text_hash((const char *)arg->key, (uint32_t)arg->key_len, text_hash(name, (uint32_t)name_len, h));
    for (int k = 0; k < 8; k++) {
        LaneSlot *slot = &b->lanes[(h + k) % LANE_SLOTS];
        if (slot->generation != b->generation) {
            Py_CLEAR(slot->lane);  /* made before Python ran, whose names may differ since */
            return slot;
        }
        if (slot->pid_kind == pid->kind && slot->pid_len == pid->len && slot->name_len == name_len &&
            slot->key_len == arg->key_len && !memcmp(slot->pid, pid_text, pid->len) &&
            !memcmp(slot->name, name, name_len) && !memcmp(slot->key, arg->key, arg->key_len))
            return slot;
    }
    return NULL;
}

/* The lane made for a counter's key, remembered in the slot lane_slot gave */
static void remember_lane(Batch *b, LaneSlot *slot, const Ev *ev, const CounterArg *arg, PyObject *lane) {
    Py_ssize_t name_len;
    const char *name = plain_str(ev, F_NAME, &name_len);
    const Span *pid = &ev->e->f[F_PID];
    *slot = (LaneSlot){span_text(b->raw, pid), name, (const char *)arg->key, pid->len, (uint32_t)name_len,
                       (uint32_t)arg->key_len, b->generation, pid->kind, Py_NewRef(lane)};
}

/* A "C" event as Records._counter takes it in detail: 1 done, 0 Python's, -1 error */
static int fast_counter(Batch *b, const Ev *ev) {
    long long start;
    int result = event_ns(ev, F_TS, &start);
    if (result <= 0) return result;
    if (__builtin_add_overflow(start, b->offset, &start) || !model_time(start)) return 0;
    PyObject *args = NULL, *name = NULL;
    Py_buffer view = {.obj = NULL};
    const char *text = NULL;
    Py_ssize_t length = 0;
    if (ev->obj) {
        if (!(args = field(ev, F_ARGS)) || PyObject_GetBuffer(args, &view, PyBUF_SIMPLE) < 0) {
            Py_XDECREF(args);
            PyErr_Clear();
            return 0;
        }
        text = view.buf;
        length = view.len;
    } else if (ev->e->f[F_ARGS].kind != K_ABSENT) {
        text = span_text(ev->raw, &ev->e->f[F_ARGS]);
        length = ev->e->f[F_ARGS].len;
    }
    CounterArg found[COUNTER_ARGS];
    int n = length ? counter_args(text, length, found) : 0;
    result = 0;
    if (n < 0) goto done;
    LaneSlot *slots[COUNTER_ARGS] = {NULL};
    PyObject *hits[COUNTER_ARGS] = {NULL};  /* borrowed from their slots, which no key of this event takes */
    int known = 1;  /* every numeric key's lane remembered: no name to make */
    for (int i = 0; i < n; i++) {
        if (!found[i].numeric) continue;
        slots[i] = lane_slot(b, ev, &found[i]);
        if (!(hits[i] = slots[i] ? slots[i]->lane : NULL)) known = 0;
    }
    if (n && !known && !(name = counter_name(b, ev))) {
        result = PyErr_Occurred() ? -1 : 0;
        goto done;
    }
    Made made[COUNTER_ARGS] = {{0}};
    for (int i = 0; i < n && result == 0; i++) {
        if (!found[i].numeric) continue;
        PyObject *lane = hits[i] ? Py_NewRef(hits[i]) : NULL;
        if (!lane) {
            PyObject *key = PyUnicode_DecodeUTF8((const char *)found[i].key, found[i].key_len, NULL);
            lane = key ? PyUnicode_FromFormat("%U [%U]", name, key) : NULL;
            Py_XDECREF(key);
            if (lane && slots[i] && !slots[i]->lane)  /* not another key's of this event */
                remember_lane(b, slots[i], ev, &found[i], lane);
        }
        if (!lane)  /* a key that is no UTF-8: Python's rules, before anything is made */
            result = PyErr_ExceptionMatches(PyExc_UnicodeDecodeError) ? (PyErr_Clear(), 2) : -1;
        else
            made[i] = (Made){.tag = P_SAMPLE, .lane = lane, .start = start, .value = found[i].value};
    }
    for (int i = 0; i < n; i++) {
        if (!made[i].tag) continue;
        if (result == 0) result = emit(b, &made[i]);  /* takes its references */
        else made_clear(&made[i]);
    }
    result = result == 0 ? 1 : result == 2 ? 0 : -1;
done:
    if (view.obj) PyBuffer_Release(&view);
    Py_XDECREF(args);
    Py_XDECREF(name);
    return result;
}

static Ev event_at(PyObject *events, const RawEvents *raw, Py_ssize_t i) {
    return raw ? (Ev){NULL, raw, &raw->events[i]} : (Ev){PyList_GET_ITEM(events, i), NULL, NULL};
}

static PyObject *pack_made(Batch *b, PyObject *by_step, Py_ssize_t from);

/* read_events(events, first_index, out, python, context[, by_step]) -> (metadata events, saw a device
 * event, filed)
 * The records of a batch's events (a list of events.Event, or RawEvents: Records.read_batches), appended
 * to ``out``: the common events in C, every other one by ``python(event, index)``
 * (Records._event); metadata is counted.
 * ``context``: a chrome_trace.ReadContext, the reader's state and rules; events of a category in
 * its ``python_cats`` (a set, or None) are all Python's.
 * ``by_step`` (a spill.ByStep: starts, orders): the records packed under their steps as pack_by_step packs them,
 * in the same pass, no NamedTuple made of what C reads: ``filed`` is (pack_by_step's runs, how
 * many records), ``out`` as it was. ``filed`` is None without ``by_step``, or where some record
 * cannot be packed: then ``out`` holds them all. */
static PyObject *read_events(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    PyObject *c = argc == 5 || argc == 6 ? argv[4] : NULL, *by_step = argc == 6 ? argv[5] : Py_None;
    RawEvents *raw = c ? raw_batch(argv[0]) : NULL;
    if (by_step != Py_None && (!PyTuple_Check(by_step) || PyTuple_GET_SIZE(by_step) != BY_STEP_FIELDS ||
                               !PyList_CheckExact(PyTuple_GET_ITEM(by_step, BY_STEP_STARTS)) ||
                               !PyDict_Check(PyTuple_GET_ITEM(by_step, BY_STEP_ORDERS))))
        c = NULL;
    if (!c || !(raw || PyList_CheckExact(argv[0])) || !PyList_CheckExact(argv[2]) || !PyTuple_Check(c) ||
        PyTuple_GET_SIZE(c) != READ_CONTEXT_FIELDS || !PyDict_Check(PyTuple_GET_ITEM(c, READ_CONTEXT_ROUTES)) ||
        !PyDict_Check(PyTuple_GET_ITEM(c, READ_CONTEXT_UNREAD)) || !PyDict_Check(PyTuple_GET_ITEM(c, READ_CONTEXT_PROCESSES)) ||
        !PyTuple_Check(PyTuple_GET_ITEM(c, READ_CONTEXT_REASONS)) ||
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(c, READ_CONTEXT_REASONS)) != LEFT_OUT_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "read_events(events: list | RawEvents, first_index, out: list, python, "
                                         "context[, by_step: (starts: list, orders: dict)])");
        return NULL;
    }
    Batch *b = PyMem_Calloc(1, sizeof(Batch));  /* zeroed: no route is remembered (generation 0) */
    if (!b) return PyErr_NoMemory();
    MadeList filed = {NULL, 0, 0};
    Py_ssize_t first_out = PyList_GET_SIZE(argv[2]);
    PyObject *result = NULL;  /* both set before any goto done */
    Kineto kineto = {.n_cats = 0};
    *b = (Batch){.routes = PyTuple_GET_ITEM(c, READ_CONTEXT_ROUTES), .rank = PyTuple_GET_ITEM(c, READ_CONTEXT_RANK),
                 .unread = PyTuple_GET_ITEM(c, READ_CONTEXT_UNREAD),
                 .reasons = PyTuple_GET_ITEM(c, READ_CONTEXT_REASONS),
                 .is_compute = PyTuple_GET_ITEM(c, READ_CONTEXT_IS_COMPUTE),
                 .layer_type = PyTuple_GET_ITEM(c, READ_CONTEXT_LAYER_TYPE),
                 .slice_type = PyTuple_GET_ITEM(c, READ_CONTEXT_SLICE_TYPE),
                 .flow_end_type = PyTuple_GET_ITEM(c, READ_CONTEXT_FLOW_END_TYPE),
                 .sample_type = PyTuple_GET_ITEM(c, READ_CONTEXT_SAMPLE_TYPE),
                 .processes = PyTuple_GET_ITEM(c, READ_CONTEXT_PROCESSES), .out = argv[2], .raw = raw,
                 .generation = 1, .filed = by_step == Py_None ? NULL : &filed};
    PyObject *python_cats = PyTuple_GET_ITEM(c, READ_CONTEXT_PYTHON_CATS);
    if (PyAnySet_Check(python_cats)) b->python_cats = python_cats;
    PyObject *host_tasks = PyTuple_GET_ITEM(c, READ_CONTEXT_HOST_TASKS);
    if (PyMapping_Check(host_tasks) && PyObject_Length(host_tasks) > 0) b->host_tasks = host_tasks;
    else if (PyErr_Occurred()) goto done;
    PyObject *rules = PyTuple_GET_ITEM(c, READ_CONTEXT_DIALECT);
    if (rules != Py_None) {
        b->kineto = &kineto;
        if (kineto_rules(&kineto, rules) < 0) goto done;
    }
    Py_ssize_t index = PyLong_AsSsize_t(argv[1]), metadata = 0;
    b->offset = PyLong_AsLongLong(PyTuple_GET_ITEM(c, READ_CONTEXT_OFFSET_NS));
    b->detail = PyObject_IsTrue(PyTuple_GET_ITEM(c, READ_CONTEXT_DETAIL));
    if (PyErr_Occurred()) goto done;
    b->host = PyObject_GetAttr(b->layer_type, S_HOST);
    b->stream = b->host ? PyObject_GetAttr(b->layer_type, S_STREAM) : NULL;
    if (!b->stream) goto done;
    for (Py_ssize_t i = 0; i < (raw ? raw->n : PyList_GET_SIZE(argv[0])); i++, index++) {
        Ev ev = event_at(argv[0], raw, i);
        int ph = phase(&ev), done_here = 0;
        if (ph < 0) goto done;
        if (ph == 'M') {
            metadata++;
            done_here = 1;
        } else if (ph == 'X' || ph == 'i') {
            done_here = fast_complete(b, &ev);
        } else if (ph == 's' || ph == 'f' || ph == 't') {
            done_here = b->detail ? fast_flow_end(b, &ev, ph == 's') : left_out(b, LEFT_OUT_FLOWS, &ev);
        } else if (ph == 'C') {
            done_here = b->detail ? fast_counter(b, &ev) : left_out(b, LEFT_OUT_COUNTERS, &ev);
        }
        if (done_here < 0) goto done;
        if (!done_here) {  /* Python's: what C counted first, then Python, whose routes may change */
            if (flush_left(b) < 0) goto done;
            b->generation++;
            Py_ssize_t made_before = PyList_GET_SIZE(argv[2]);
            PyObject *event = event_object(&ev), *at = event ? PyLong_FromSsize_t(index) : NULL;
            PyObject *ignored = at ? PyObject_CallFunctionObjArgs(argv[3], event, at, NULL) : NULL;
            Py_XDECREF(event); Py_XDECREF(at);
            if (!ignored) goto done;
            Py_DECREF(ignored);
            for (Py_ssize_t k = made_before; b->filed && k < PyList_GET_SIZE(argv[2]); k++) {
                Made m = {.record = Py_NewRef(PyList_GET_ITEM(argv[2], k))};  /* in order among C's */
                if (emit(b, &m) < 0) goto done;
            }
        }
    }
    if (flush_left(b) < 0) goto done;
    for (int i = 0; i < b->n_tasks; i++) Py_CLEAR(b->tasks[i].task);  /* as pack_by_step's records would be: */
    for (int i = 0; i < NAME_SLOTS; i++) Py_CLEAR(b->names[i].name);  /* a str is shared if records share it */
    for (int i = 0; i < LANE_SLOTS; i++) Py_CLEAR(b->lanes[i].lane);
    PyObject *runs = b->filed ? pack_made(b, by_step, first_out) : Py_NewRef(Py_None);
    if (runs) result = Py_BuildValue("(nON)", metadata, b->saw_device ? Py_True : Py_False, runs);
done:
    kineto_release(&kineto);
    Py_XDECREF(b->host); Py_XDECREF(b->stream);
    for (int i = 0; i < b->n_tasks; i++) Py_XDECREF(b->tasks[i].task);
    for (int i = 0; i < NAME_SLOTS; i++) Py_XDECREF(b->names[i].name);
    for (int i = 0; i < LANE_SLOTS; i++) Py_XDECREF(b->lanes[i].lane);
    for (Py_ssize_t i = 0; i < filed.n; i++) made_clear(&filed.at[i]);
    PyMem_Free(filed.at);
    PyMem_Free(b);
    return result;
}

/* steps_and_names(events, first_index, marker=None) -> ([metadata events], [(index, event) of possible steps])
 * The first pass over a batch (a list of Event, or RawEvents: Records.read_steps): "M" events,
 * and the "X" events that may be steps (category "Iteration Time", "Reduce" or Paddle's
 * "ProfileStep", or a name starting "ProfilerStep#"; with a ``marker``, a name holding it), as Events.
 * The rule: every event Records._metadata and Records._complete's steps (Dialect.marks_step) take. */
static PyObject *steps_and_names(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    RawEvents *raw = argc == 2 || argc == 3 ? raw_batch(argv[0]) : NULL;
    PyObject *marker = argc == 3 && argv[2] != Py_None ? argv[2] : NULL;
    if ((argc != 2 && argc != 3) || !(raw || PyList_CheckExact(argv[0])) ||
        (marker && (!PyUnicode_CheckExact(marker) || !PyUnicode_GET_LENGTH(marker)))) {
        PyErr_SetString(PyExc_TypeError, "steps_and_names(events: list | RawEvents, first_index, marker: str = None)");
        return NULL;
    }
    Py_ssize_t index = PyLong_AsSsize_t(argv[1]), marker_n = 0;
    if (index == -1 && PyErr_Occurred()) return NULL;
    const char *marker_text = marker ? PyUnicode_AsUTF8AndSize(marker, &marker_n) : NULL;
    if (marker && !marker_text) return NULL;
    PyObject *names = PyList_New(0), *steps = PyList_New(0), *result = NULL;
    if (!names || !steps) goto done;
    for (Py_ssize_t i = 0; i < (raw ? raw->n : PyList_GET_SIZE(argv[0])); i++, index++) {
        Ev ev = event_at(argv[0], raw, i);
        int ph = phase(&ev), step = 0, rc = 0;
        if (ph < 0) goto done;
        if (ph == 'X') {
            if ((step = field_is(&ev, F_CAT, S_ITERATION)) == 0 && (step = field_is(&ev, F_CAT, S_REDUCE)) == 0 &&
                (step = field_is(&ev, F_CAT, S_PROFILE_STEP)) == 0)
                step = step_name(&ev);
            if (step < 0) goto done;
            step = step == 1;
            if (!step && marker && (step = name_holds(&ev, marker, marker_text, marker_n)) < 0) goto done;
        }
        if (ph == 'M' || step) {
            PyObject *event = event_object(&ev), *item = NULL;
            if (event && ph == 'M') item = Py_NewRef(event);
            else if (event) item = Py_BuildValue("(nO)", index, event);
            rc = item ? PyList_Append(ph == 'M' ? names : steps, item) : -1;
            Py_XDECREF(event); Py_XDECREF(item);
        }
        if (rc < 0) goto done;
    }
    result = PyTuple_Pack(2, names, steps);
done:
    Py_XDECREF(names); Py_XDECREF(steps);
    return result;
}


/* read_events' records (``b->filed``, from ``out``'s item ``from`` on those Python made) packed
 * by step as pack_by_step packs their NamedTuples (``by_step``: a spill.ByStep). (runs, how
 * many records), ``out`` as it was; or None with every record in ``out`` where one cannot be packed */
static PyObject *pack_made(Batch *b, PyObject *by_step, Py_ssize_t from) {
    PyObject *const types[3] = {b->slice_type, b->sample_type, b->flow_end_type};
    PyObject *runs = pack_made_by_step(b->filed->at, b->filed->n, by_step, types), *result = NULL;
    PyObject *all = NULL;  /* the records, where pack_by_step would not pack them */
    if (!runs) return NULL;
    if (runs == Py_None && !(all = PyList_New(b->filed->n))) goto done;
    for (Py_ssize_t i = 0; all && i < b->filed->n; i++) {
        PyObject *r = made_record(b, &b->filed->at[i]);
        if (!r) goto done;
        PyList_SET_ITEM(all, i, r);
    }
    if (PyList_SetSlice(b->out, from, PyList_GET_SIZE(b->out), all) == 0)
        result = runs == Py_None ? Py_NewRef(Py_None) : Py_BuildValue("(On)", runs, b->filed->n);
done:
    Py_XDECREF(all);
    Py_DECREF(runs);
    return result;
}

PyMethodDef CHROME_TRACE_METHODS[] = {
    {"steps_and_names", (PyCFunction)(void (*)(void))steps_and_names, METH_FASTCALL,
     "steps_and_names(events, first_index, marker=None) -> ([metadata events], [(index, event) of possible steps])"},
    {"read_events", (PyCFunction)(void (*)(void))read_events, METH_FASTCALL,
     "read_events(events, first_index, out, python, context[, by_step]) -> (metadata events, saw a device event, filed)"},
    {"us_to_ns", (PyCFunction)(void (*)(void))us_to_ns, METH_FASTCALL,
     "us_to_ns(us, exact) -> int: µs (a number, or a string with at most 3 decimals) as ns"},
    {NULL, NULL, 0, NULL},
};
