/* The slice placement loop of layout.Lanes.place, in C: it runs once per slice written.
 *
 * A sub-lane is a Python list [track, state]; its state, a bytearray of C long longs: the start of
 * its last slice, its floor (where slices ended by a chunk's close lie: nothing may nest into them
 * any more), how many of its slices are open, and their ends (outermost first), with room for
 * more: no int object per open end. A slice goes on the first sub-lane of its lane where it starts
 * no earlier than the last slice there and, inside the innermost slice still open at its start,
 * ends within it; else on a new sub-lane, on the track Python names (``track_of(slice, index)``). Ends of
 * slices that closed before it are placed first, then its begin; at the close, every slice still
 * open ends. The events come out compact (``Codes``), not as a Python object each: the encoders
 * read them as they are (layout.Placement).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>

#include "records.h"

enum { TRACK, STATE, SUBLANE_SIZE };  /* a sub-lane's items */
enum { LAST_START, FLOOR, OPEN, FIRST_END };  /* its state's: then the open slices' ends */

static long long *state_of(PyObject *sub) { return (long long *)PyByteArray_AS_STRING(PyList_GET_ITEM(sub, STATE)); }

/* Room in ``sub``'s state for one more end: the state, or NULL on error */
static long long *room(PyObject *sub) {
    PyObject *state = PyList_GET_ITEM(sub, STATE);
    long long *at = state_of(sub);
    Py_ssize_t cap = PyByteArray_GET_SIZE(state) / (Py_ssize_t)sizeof(long long) - FIRST_END;
    if (at[OPEN] < cap) return at;
    if (PyByteArray_Resize(state, (FIRST_END + 2 * cap) * sizeof(long long)) < 0) return NULL;
    return state_of(sub);
}

/* A new sub-lane on ``track``: nothing open, no floor */
static PyObject *new_sublane(PyObject *track) {
    enum { FIRST_ROOM = 4 };
    long long state[FIRST_END + FIRST_ROOM] = {[LAST_START] = LLONG_MIN, [FLOOR] = LLONG_MIN, [OPEN] = 0};
    PyObject *bytes = PyByteArray_FromStringAndSize((const char *)state, sizeof state);
    PyObject *sub = bytes ? PyList_New(SUBLANE_SIZE) : NULL;
    if (!sub) { Py_XDECREF(bytes); return NULL; }
    PyList_SET_ITEM(sub, TRACK, Py_NewRef(track));
    PyList_SET_ITEM(sub, STATE, bytes);
    return sub;
}

static PyObject *LAYER_ORDERS;  /* the name of the {Layer: order} dict layout.py sets here */

/* PyLong_AsLongLong converts through _PyLong_AsByteArray (slow for epoch ns); this one does not */
static int as_ll(PyObject *value, long long *out) {
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) PyErr_SetString(PyExc_OverflowError, "a time past 2**63 ns");
    return (overflow || (*out == -1 && PyErr_Occurred())) ? -1 : 0;
}

/* The events placed, compact: per event three int64, (track position * 2 + 1, -1, the end's time)
 * for an end, (track position * 2, the slice's index, its start) for a begin; a track's position
 * is where it first began in this call's list of tracks. No Python object per event. */
typedef struct { long long *data; Py_ssize_t len, cap; } Codes;

static int code(Codes *c, long long kind, long long index, long long ts) {
    if (c->len + 3 > c->cap) {
        Py_ssize_t cap = c->cap ? 2 * c->cap : 6144;
        long long *grown = PyMem_Realloc(c->data, cap * sizeof *grown);
        if (!grown) { PyErr_NoMemory(); return -1; }
        c->data = grown, c->cap = cap;
    }
    c->data[c->len++] = kind;
    c->data[c->len++] = index;
    c->data[c->len++] = ts;
    return 0;
}

/* Each sub-lane's position in the call's tracks, by the sub-lane's address (open addressing) */
typedef struct { PyObject *sub; Py_ssize_t position; } Seen;
typedef struct { Seen *slots; size_t cap, used; PyObject *tracks; } Positions;

static Seen *seen_slot(Seen *slots, size_t cap, PyObject *sub) {
    size_t at = ((size_t)sub >> 4) * 0x9E3779B97F4A7C15ULL & (cap - 1);
    while (slots[at].sub && slots[at].sub != sub) at = (at + 1) & (cap - 1);
    return &slots[at];
}

/* The position of ``sub``'s track, added to the tracks on its first use: -1 on error */
static Py_ssize_t position_of(Positions *p, PyObject *sub) {
    if (2 * (p->used + 1) > p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        Seen *grown = PyMem_Calloc(cap, sizeof *grown);
        if (!grown) { PyErr_NoMemory(); return -1; }
        for (size_t i = 0; i < p->cap; i++)
            if (p->slots[i].sub) *seen_slot(grown, cap, p->slots[i].sub) = p->slots[i];
        PyMem_Free(p->slots);
        p->slots = grown, p->cap = cap;
    }
    Seen *slot = seen_slot(p->slots, p->cap, sub);
    if (!slot->sub) {
        if (PyList_Append(p->tracks, PyList_GET_ITEM(sub, TRACK)) < 0) return -1;
        *slot = (Seen){sub, PyList_GET_SIZE(p->tracks) - 1};
        p->used++;
    }
    return slot->position;
}

static int is_sublane(PyObject *sub) {
    if (PyList_CheckExact(sub) && PyList_GET_SIZE(sub) == SUBLANE_SIZE && PyByteArray_CheckExact(PyList_GET_ITEM(sub, STATE)))
        return 1;
    PyErr_SetString(PyExc_TypeError, "a sub-lane is [track, state]");
    return 0;
}

/* Whether slice [start, end] goes on ``sub`` */
static int fits(PyObject *sub, long long start, long long end) {
    const long long *state = state_of(sub);
    if (start < state[LAST_START] || start < state[FLOOR]) return 0;
    for (long long inner = state[OPEN] - 1; inner >= 0; inner--) {
        long long open_end = state[FIRST_END + inner];
        if (open_end > start) return end <= open_end;  /* the innermost slice open at start */
    }
    return 1;
}

/* End the open slices of ``sub`` that close at or before ``until``, innermost first */
static int end_until(Codes *out, PyObject *sub, Py_ssize_t position, long long until) {
    long long *state = state_of(sub);
    for (; state[OPEN] > 0 && state[FIRST_END + state[OPEN] - 1] <= until; state[OPEN]--)
        if (code(out, 2 * position + 1, -1, state[FIRST_END + state[OPEN] - 1]) < 0) return -1;
    return 0;
}

/* Put slice ``i`` on ``sub``: end what closed before it, then begin it */
static int push(Codes *out, Positions *p, PyObject *sub, Py_ssize_t i, long long start, long long end) {
    Py_ssize_t position = position_of(p, sub);
    if (position < 0 || end_until(out, sub, position, start) < 0) return -1;
    long long *state = room(sub);
    if (!state) return -1;
    state[FIRST_END + state[OPEN]++] = end;
    state[LAST_START] = start;
    return code(out, 2 * position, i, start);
}

/* A chunk's close: every slice still open ends, and its sub-lane's floor rises to the outermost
 * end (nothing may nest into a closed chunk's slices) */
static int close_all(Codes *out, Positions *p, PyObject *lanes) {
    PyObject *subs;
    Py_ssize_t at = 0;
    while (PyDict_Next(lanes, &at, NULL, &subs)) {
        if (!PyList_CheckExact(subs)) { PyErr_SetString(PyExc_TypeError, "a lane is a list of sub-lanes"); return -1; }
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(subs); j++) {
            PyObject *sub = PyList_GET_ITEM(subs, j);
            if (!is_sublane(sub)) return -1;
            long long *state = state_of(sub);
            if (!state[OPEN]) continue;
            if (state[FIRST_END] > state[FLOOR]) state[FLOOR] = state[FIRST_END];
            Py_ssize_t position = position_of(p, sub);
            if (position < 0 || end_until(out, sub, position, LLONG_MAX) < 0) return -1;
        }
    }
    return 0;
}

/* A slice's lane is its first fields: (rank, layer, lane) */
_Static_assert(SLICE_RANK == 0 && SLICE_LAYER == 1 && SLICE_LANE == 2, "a lane's key is the Slice's head");
#define LANE_KEY_FIELDS 3

static int same_lane(PyObject *key, PyObject *s) {
    for (Py_ssize_t i = 0; i < LANE_KEY_FIELDS; i++) {
        PyObject *a = PyTuple_GET_ITEM(key, i), *b = PyTuple_GET_ITEM(s, i);
        if (a == b) continue;
        int equal = PyObject_RichCompareBool(a, b, Py_EQ);
        if (equal <= 0) return equal;
    }
    return 1;
}

/* The sub-lane of ``s`` (its lane's ``subs``): the first it fits, else a new one, held by ``subs`` */
static PyObject *sublane_for(PyObject *subs, PyObject *s, long long start, long long end, PyObject *track_of) {
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(subs); j++) {
        PyObject *sub = PyList_GET_ITEM(subs, j);
        if (!is_sublane(sub)) return NULL;
        if (fits(sub, start, end)) return sub;
    }
    PyObject *index = PyLong_FromSsize_t(PyList_GET_SIZE(subs));
    PyObject *track = index ? PyObject_CallFunctionObjArgs(track_of, s, index, NULL) : NULL;
    Py_XDECREF(index);
    PyObject *made = track ? new_sublane(track) : NULL;
    Py_XDECREF(track);
    if (!made) return NULL;
    int rc = PyList_Append(subs, made);
    Py_DECREF(made);
    return rc < 0 ? NULL : made;  /* subs holds it */
}

/* place(slices, lanes, track_of, times): ``times`` None, or the slices' (start, dur) as two native
 * int64 each (``sorted_and_timed``'s): then their ints are not read again */
static PyObject *place(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 4 || !PyList_CheckExact(argv[0]) || !PyDict_CheckExact(argv[1]) ||
        (argv[3] != Py_None && (!PyBytes_CheckExact(argv[3]) ||
                                PyBytes_GET_SIZE(argv[3]) != PyList_GET_SIZE(argv[0]) * 2 * (Py_ssize_t)sizeof(long long)))) {
        PyErr_SetString(PyExc_TypeError, "place(slices: list, lanes: dict, track_of, times: bytes of 2 int64 a slice | None)");
        return NULL;
    }
    PyObject *slices = argv[0], *lanes = argv[1], *track_of = argv[2];
    const long long *times = argv[3] == Py_None ? NULL : (const long long *)PyBytes_AS_STRING(argv[3]);
    PyObject *key = NULL, *subs = NULL, *result = NULL;  /* subs: borrowed from lanes */
    Codes out = {0};
    Positions p = {.tracks = PyList_New(0)};
    if (!p.tracks) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(slices); i++) {
        PyObject *s = PyList_GET_ITEM(slices, i);
        long long start, dur, end;
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) <= SLICE_DUR_NS) {
            PyErr_SetString(PyExc_TypeError, "expected a Slice");
            goto done;
        }
        int same = key ? same_lane(key, s) : 0;
        if (same < 0) goto done;
        if (!same) {  /* a lane's slices come together: its sub-lanes are looked up once */
            Py_XSETREF(key, PyTuple_GetSlice(s, 0, LANE_KEY_FIELDS));
            if (!key) goto done;
            subs = PyDict_GetItemWithError(lanes, key);
            if (!subs) {
                if (PyErr_Occurred() || !(subs = PyList_New(0))) goto done;
                int rc = PyDict_SetItem(lanes, key, subs);
                Py_DECREF(subs);
                if (rc < 0) goto done;
            }
        }
        if (times)
            start = times[2 * i], dur = times[2 * i + 1];
        else if (as_ll(PyTuple_GET_ITEM(s, SLICE_START_NS), &start) < 0 ||
                 as_ll(PyTuple_GET_ITEM(s, SLICE_DUR_NS), &dur) < 0)
            goto done;
        if (__builtin_add_overflow(start, dur, &end)) {
            PyErr_SetString(PyExc_OverflowError, "a slice ends past 2**63 ns");
            goto done;
        }
        PyObject *chosen = sublane_for(subs, s, start, end, track_of);
        if (!chosen || push(&out, &p, chosen, i, start, end) < 0) goto done;
    }
    if (close_all(&out, &p, lanes) == 0)
        result = Py_BuildValue("(Ny#)", Py_NewRef(p.tracks), out.data ? (const char *)out.data : "",
                               (Py_ssize_t)(out.len * sizeof(long long)));
done:
    Py_XDECREF(key);
    Py_DECREF(p.tracks);
    PyMem_Free(p.slots);
    PyMem_Free(out.data);
    return result;
}

/* The sort key that feeds ``place``: (layer order, lane, start, -dur), parents before children. */
static PyObject *by_lane_and_start(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 1 || !PyTuple_Check(argv[0]) || PyTuple_GET_SIZE(argv[0]) <= SLICE_DUR_NS) {
        PyErr_SetString(PyExc_TypeError, "by_lane_and_start(slice)");
        return NULL;
    }
    /* layout.py sets the orders on this module; read from its dict, with a name made once */
    PyObject *s = argv[0], *orders = PyDict_GetItemWithError(PyModule_GetDict(module), LAYER_ORDERS);
    PyObject *order = orders ? PyDict_GetItemWithError(orders, PyTuple_GET_ITEM(s, SLICE_LAYER)) : NULL;
    if (!order) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "no order for this layer (layer_orders)");
        return NULL;
    }
    PyObject *minus_dur = PyNumber_Negative(PyTuple_GET_ITEM(s, SLICE_DUR_NS));
    if (!minus_dur) return NULL;
    PyObject *key = PyTuple_Pack(4, order, PyTuple_GET_ITEM(s, SLICE_LANE), PyTuple_GET_ITEM(s, SLICE_START_NS),
                                 minus_dur);
    Py_DECREF(minus_dur);
    return key;
}

/* sorted_by_lane_and_start(slices) -> a new list: sorted(slices, key=by_lane_and_start), without a
 * key tuple per slice. Ties keep their order (Python's sort is stable): the position decides last. */
typedef struct { long long order, start, dur; PyObject *lane, *slice; Py_ssize_t at; } Placed;

static int placed_order(const void *a, const void *b) {
    const Placed *x = a, *y = b;
    if (x->order != y->order) return x->order < y->order ? -1 : 1;
    if (x->lane != y->lane) {
        int lane = PyUnicode_Compare(x->lane, y->lane);  /* two str: never an error */
        if (lane) return lane;
    }
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    if (x->dur != y->dur) return x->dur > y->dur ? -1 : 1;  /* -dur: the longer first */
    return (x->at > y->at) - (x->at < y->at);
}

/* The slices of ``given`` as a new list in the order of by_lane_and_start; with ``times``, also
 * their (start, dur) in that order as two native int64 each (bytes) */
static PyObject *sort_slices(PyObject *module, PyObject *given, PyObject **times) {
    PyObject *orders = PyDict_GetItemWithError(PyModule_GetDict(module), LAYER_ORDERS);
    PyObject *slices = orders ? PySequence_List(given) : NULL;
    if (!slices) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "no layer_orders");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(slices);
    Placed *placed = PyMem_Malloc((n ? n : 1) * sizeof(Placed));
    if (!placed) { Py_DECREF(slices); return PyErr_NoMemory(); }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyList_GET_ITEM(slices, i), *order;
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) <= SLICE_DUR_NS || !PyUnicode_CheckExact(PyTuple_GET_ITEM(s, SLICE_LANE))) {
            PyErr_SetString(PyExc_TypeError, "sorted_by_lane_and_start: a Slice whose lane is a str");
            goto fail;
        }
        if (!(order = PyDict_GetItemWithError(orders, PyTuple_GET_ITEM(s, SLICE_LAYER)))) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "no order for this layer (layer_orders)");
            goto fail;
        }
        placed[i] = (Placed){.lane = PyTuple_GET_ITEM(s, SLICE_LANE), .slice = s, .at = i};
        if (as_ll(order, &placed[i].order) < 0 || as_ll(PyTuple_GET_ITEM(s, SLICE_START_NS), &placed[i].start) < 0 ||
            as_ll(PyTuple_GET_ITEM(s, SLICE_DUR_NS), &placed[i].dur) < 0)
            goto fail;
    }
    qsort(placed, n, sizeof(Placed), placed_order);
    if (times) {
        if (!(*times = PyBytes_FromStringAndSize(NULL, n * 2 * (Py_ssize_t)sizeof(long long)))) goto fail;
        long long *at = (long long *)PyBytes_AS_STRING(*times);
        for (Py_ssize_t i = 0; i < n; i++) at[2 * i] = placed[i].start, at[2 * i + 1] = placed[i].dur;
    }
    for (Py_ssize_t i = 0; i < n; i++) PyList_SET_ITEM(slices, i, placed[i].slice);  /* a permutation: refs kept */
    PyMem_Free(placed);
    return slices;
fail:
    PyMem_Free(placed);
    Py_DECREF(slices);
    return NULL;
}

static PyObject *sorted_by_lane_and_start(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 1) {
        PyErr_SetString(PyExc_TypeError, "sorted_by_lane_and_start(slices)");
        return NULL;
    }
    return sort_slices(module, argv[0], NULL);
}

/* sorted_and_timed(slices) -> (sorted_by_lane_and_start(slices), their (start, dur) for place) */
static PyObject *sorted_and_timed(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 1) {
        PyErr_SetString(PyExc_TypeError, "sorted_and_timed(slices)");
        return NULL;
    }
    PyObject *times = NULL, *slices = sort_slices(module, argv[0], &times);
    return slices ? Py_BuildValue("(NN)", slices, times) : NULL;
}

/* counter_values(samples, track_of, Value) -> [Value(track, start_ns, value), ...]: the samples in the
 * order of sorted(samples, key=(lane, start_ns)) (ties keep theirs), ``track_of(sample)`` asked at each
 * change of lane or rank: Lanes.placement's counter samples (~80,000 a step for a database's memory and
 * counters) with no key tuple and no Python loop per sample. */
typedef struct { PyObject *lane, *sample; long long start; Py_ssize_t at; } Timed;

static int start_order(const void *a, const void *b) {
    const Timed *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return (x->at > y->at) - (x->at < y->at);
}

typedef struct { PyObject *lane; Py_ssize_t number; } Distinct;

static int text_order(const void *a, const void *b) {
    return PyUnicode_Compare(((const Distinct *)a)->lane, ((const Distinct *)b)->lane);  /* two str: no error */
}

/* ``timed`` sorted by (lane's text, start, at), without comparing lanes' texts pair by pair: a
 * step's samples are thousands on a few dozen lanes (torch_npu's counters), a lane one str, in
 * time order. Each distinct lane object is ranked by its text (equal texts alike), the samples
 * counted out by rank (stable: in their order), and a rank's run sorted by start only where it is
 * not already. 0, or -1 on error (no memory). */
static int by_lane(Timed *timed, Py_ssize_t n) {
    Py_ssize_t cap = 16, n_distinct = 0, size = n ? n : 1;
    while (cap < 2 * n) cap *= 2;
    Py_ssize_t *table = PyMem_Malloc(cap * sizeof(Py_ssize_t)), *number = PyMem_Malloc(size * sizeof(Py_ssize_t));
    Py_ssize_t *rank = PyMem_Malloc(size * sizeof(Py_ssize_t)), *ends = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    Py_ssize_t *out_rank = PyMem_Malloc(size * sizeof(Py_ssize_t));
    Distinct *distinct = PyMem_Malloc(size * sizeof(Distinct));
    Timed *out = PyMem_Malloc(size * sizeof(Timed));
    int rc = -1;
    if (!table || !number || !rank || !ends || !out_rank || !distinct || !out) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < cap; i++) table[i] = -1;
    for (Py_ssize_t i = 0; i < n; i++) {  /* each lane object's number, by its address */
        size_t at = ((uintptr_t)timed[i].lane >> 4) & (cap - 1);
        while (table[at] >= 0 && distinct[table[at]].lane != timed[i].lane) at = (at + 1) & (cap - 1);
        if (table[at] < 0) {
            distinct[n_distinct] = (Distinct){timed[i].lane, n_distinct};
            table[at] = n_distinct++;
        }
        number[i] = table[at];
    }
    qsort(distinct, n_distinct, sizeof(Distinct), text_order);
    for (Py_ssize_t k = 0, r = -1; k < n_distinct; k++) {  /* equal texts, one rank */
        if (k == 0 || text_order(&distinct[k - 1], &distinct[k])) r++;
        rank[distinct[k].number] = r;
    }
    for (Py_ssize_t i = 0; i < n; i++) ends[rank[number[i]] + 1]++;
    for (Py_ssize_t r = 0; r < n; r++) ends[r + 1] += ends[r];  /* ends[r]: where rank r starts */
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t r = rank[number[i]], at = ends[r]++;
        out[at] = timed[i];
        out_rank[at] = r;
    }
    for (Py_ssize_t lo = 0, hi; lo < n; lo = hi) {
        int sorted = 1;
        for (hi = lo + 1; hi < n && out_rank[hi] == out_rank[lo]; hi++)
            if (out[hi].start < out[hi - 1].start) sorted = 0;
        if (!sorted) qsort(out + lo, hi - lo, sizeof(Timed), start_order);
    }
    memcpy(timed, out, n * sizeof(Timed));
    rc = 0;
done:
    PyMem_Free(table); PyMem_Free(number); PyMem_Free(rank); PyMem_Free(ends); PyMem_Free(out_rank);
    PyMem_Free(distinct); PyMem_Free(out);
    return rc;
}

/* Value(track, start, value) as tuple.__new__(Value, ...) makes it */
static PyObject *new_value(PyTypeObject *type, PyObject *track, PyObject *sample) {
    PyObject *value = type->tp_alloc(type, 3);
    if (!value) return NULL;
    PyTuple_SET_ITEM(value, 0, Py_NewRef(track));
    PyTuple_SET_ITEM(value, 1, Py_NewRef(PyTuple_GET_ITEM(sample, SAMPLE_START_NS)));
    PyTuple_SET_ITEM(value, 2, Py_NewRef(PyTuple_GET_ITEM(sample, SAMPLE_VALUE)));
    return value;
}

/* whether the run of ``track`` (a Track, or NULL before the first) goes on to ``sample``: the same lane
 * and rank; -1 on error */
static int same_run(PyObject *track, PyObject *lane, PyObject *sample) {
    if (!track) return 0;
    int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(sample, SAMPLE_LANE), lane, Py_EQ);
    if (same <= 0) return same;
    return PyObject_RichCompareBool(PyTuple_GET_ITEM(sample, SAMPLE_RANK), PyTuple_GET_ITEM(track, TRACK_RANK), Py_EQ);
}

static PyObject *counter_values(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 3 || !PyType_Check(argv[2]) || !PyType_IsSubtype((PyTypeObject *)argv[2], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "counter_values(samples, track_of, Value): Value a NamedTuple");
        return NULL;
    }
    PyObject *samples = PySequence_Fast(argv[0], "counter_values: samples, a sequence");
    if (!samples) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(samples);
    Timed *timed = PyMem_Malloc((n ? n : 1) * sizeof(Timed));
    PyObject *out = timed ? PyList_New(n) : NULL, *track = NULL, *lane = NULL;
    if (!out) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PySequence_Fast_GET_ITEM(samples, i);
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) != SAMPLE_FIELDS || !PyUnicode_CheckExact(PyTuple_GET_ITEM(s, SAMPLE_LANE))) {
            PyErr_SetString(PyExc_TypeError, "counter_values: a Sample whose lane is a str");
            goto fail;
        }
        timed[i] = (Timed){.lane = PyTuple_GET_ITEM(s, SAMPLE_LANE), .sample = s, .at = i};
        if (as_ll(PyTuple_GET_ITEM(s, SAMPLE_START_NS), &timed[i].start) < 0) goto fail;
    }
    if (by_lane(timed, n) < 0) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = timed[i].sample;
        int same = same_run(track, lane, s);
        if (same < 0) goto fail;
        if (!same) {
            Py_XSETREF(track, PyObject_CallOneArg(argv[1], s));
            if (!track) goto fail;
            if (!PyTuple_Check(track) || PyTuple_GET_SIZE(track) <= TRACK_RANK) {
                PyErr_SetString(PyExc_TypeError, "counter_values: track_of gave no Track");
                goto fail;
            }
            lane = timed[i].lane;  /* borrowed: the samples hold it */
        }
        PyObject *value = new_value((PyTypeObject *)argv[2], track, s);
        if (!value) goto fail;
        PyList_SET_ITEM(out, i, value);
    }
    Py_XDECREF(track);
    PyMem_Free(timed);
    Py_DECREF(samples);
    return out;
fail:
    Py_XDECREF(track);
    Py_XDECREF(out);
    PyMem_Free(timed);
    Py_DECREF(samples);
    return NULL;
}

/* of_layer(slices, layer) -> [s for s in slices if s.layer is layer], without a Python loop */
static PyObject *of_layer(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 2) {
        PyErr_SetString(PyExc_TypeError, "of_layer(slices, layer)");
        return NULL;
    }
    PyObject *slices = PySequence_Fast(argv[0], "of_layer: slices must be a sequence");
    PyObject *out = slices ? PyList_New(0) : NULL;
    for (Py_ssize_t i = 0; out && i < PySequence_Fast_GET_SIZE(slices); i++) {
        PyObject *s = PySequence_Fast_GET_ITEM(slices, i);
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) <= SLICE_LAYER) {
            PyErr_SetString(PyExc_TypeError, "expected a Slice");
            Py_CLEAR(out);
        } else if (PyTuple_GET_ITEM(s, SLICE_LAYER) == argv[1] && PyList_Append(out, s) < 0) {
            Py_CLEAR(out);
        }
    }
    Py_XDECREF(slices);
    return out;
}

/* release(slices): empties the list, freeing its slices (those it alone holds) in order, each one's
 * objects asked for a few slices ahead: freeing reads the header of every int, str and bytes a slice
 * holds, made long before and cold, and one miss after another was most of a step's dealloc. The
 * list is emptied first (as list.clear does): a dealloc running Python sees it empty. */
#define RELEASE_FAR 16
#define RELEASE_NEAR 8

static PyObject *release(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 1 || !PyList_CheckExact(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "release(slices: list)");
        return NULL;
    }
    PyListObject *list = (PyListObject *)argv[0];
    PyObject **items = list->ob_item;
    Py_ssize_t n = Py_SIZE(list);
    list->ob_item = NULL;
    list->allocated = 0;
    Py_SET_SIZE(list, 0);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + RELEASE_FAR < n) __builtin_prefetch(items[i + RELEASE_FAR]);
        PyObject *near = i + RELEASE_NEAR < n ? items[i + RELEASE_NEAR] : NULL;
        if (near && Py_REFCNT(near) == 1 && PyTuple_Check(near) && PyTuple_GET_SIZE(near) >= SLICE_FIELDS) {
            __builtin_prefetch(PyTuple_GET_ITEM(near, SLICE_START_NS));
            __builtin_prefetch(PyTuple_GET_ITEM(near, SLICE_DUR_NS));
            __builtin_prefetch(PyTuple_GET_ITEM(near, SLICE_ARGS));
        }
        Py_XDECREF(items[i]);
    }
    PyMem_Free(items);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"release", (PyCFunction)(void (*)(void))release, METH_FASTCALL,
     "release(slices) -> None: empties the list, its slices freed in order, their objects asked for ahead"},
    {"of_layer", (PyCFunction)(void (*)(void))of_layer, METH_FASTCALL,
     "of_layer(slices, layer) -> the slices of that layer, in their order"},
    {"sorted_by_lane_and_start", (PyCFunction)(void (*)(void))sorted_by_lane_and_start, METH_FASTCALL,
     "sorted_by_lane_and_start(slices) -> sorted(slices, key=by_lane_and_start), as a new list"},
    {"sorted_and_timed", (PyCFunction)(void (*)(void))sorted_and_timed, METH_FASTCALL,
     "sorted_and_timed(slices) -> (sorted_by_lane_and_start(slices), their (start, dur) as two int64 each)"},
    {"place", (PyCFunction)(void (*)(void))place, METH_FASTCALL,
     "place(slices, lanes, track_of, times) -> (tracks, codes): the slices placed and every one ended, compact"},
    {"counter_values", (PyCFunction)(void (*)(void))counter_values, METH_FASTCALL,
     "counter_values(samples, track_of, Value) -> the samples as Values, in (lane, start) order"},
    {"by_lane_and_start", (PyCFunction)(void (*)(void))by_lane_and_start, METH_FASTCALL,
     "by_lane_and_start(slice) -> (layer order, lane, start, -dur)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_layout", .m_doc = "The slice placement loop of layout.py.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__layout(void) {
    LAYER_ORDERS = PyUnicode_InternFromString("layer_orders");
    return LAYER_ORDERS ? PyModule_Create(&module) : NULL;
}
