/* flows in C: which slice and start each flow end binds to (flows.bind_ends: enclosing, bind_ends),
 * one arrow between two slices (flows.Linker._arrow: arrow, arrows) and its id (flows.flow_id:
 * flow_id). tests/readers/test_chrome_trace.py holds each to the Python it follows. */
#include "core.h"

#include <stdlib.h>
#include <string.h>

/* -- flows.bind_ends: the slice each flow end binds to ------------------------------------------- */

typedef struct {
    long long start, neg_dur;  /* sorted by start, outer slices (longer) first at equal starts */
    Py_ssize_t index;
} Member;

static int member_order(const void *a, const void *b) {
    const Member *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    if (x->neg_dur != y->neg_dur) return x->neg_dur < y->neg_dur ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static int times_of(PyObject *s, long long *start, long long *dur) {
    int overflow = 0;
    *start = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(s, SLICE_START_NS), &overflow);
    if (!overflow && !(*start == -1 && PyErr_Occurred()))
        *dur = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(s, SLICE_DUR_NS), &overflow);
    if (overflow) PyErr_SetString(PyExc_OverflowError, "a slice past 2**63 ns");
    return PyErr_Occurred() ? -1 : 0;
}

/* The number of the lane (layer, lane) in ``lanes`` ({lane: [layer, number, ...]}): -1 if it
 * has none, -2 on error; with ``add``, a new lane gets number ``*count`` (then counted). Keyed by
 * the lane's str, not a (layer, lane) tuple: no tuple made per slice. */
static Py_ssize_t lane_number(PyObject *lanes, PyObject *layer, PyObject *lane, Py_ssize_t *count) {
    PyObject *known = PyDict_GetItemWithError(lanes, lane);
    if (!known && PyErr_Occurred()) return -2;
    for (Py_ssize_t i = 0; known && i < PyList_GET_SIZE(known); i += 2) {
        int same = PyObject_RichCompareBool(PyList_GET_ITEM(known, i), layer, Py_EQ);
        if (same < 0) return -2;
        if (same) return PyLong_AsSsize_t(PyList_GET_ITEM(known, i + 1));
    }
    if (!count) return -1;
    PyObject *number = PyLong_FromSsize_t(*count);
    if (!number) return -2;
    int rc;
    if (known) {
        rc = PyList_Append(known, layer) < 0 || PyList_Append(known, number) < 0 ? -1 : 0;
    } else {
        PyObject *made = PyList_New(0);
        rc = !made || PyList_Append(made, layer) < 0 || PyList_Append(made, number) < 0 ||
             PyDict_SetItem(lanes, lane, made) < 0 ? -1 : 0;
        Py_XDECREF(made);
    }
    Py_DECREF(number);
    return rc < 0 ? -2 : (*count)++;
}

/* lane_number of a FlowEnd's lane */
static Py_ssize_t end_lane(PyObject *lanes, PyObject *end, Py_ssize_t *count) {
    return lane_number(lanes, PyTuple_GET_ITEM(end, FLOW_END_LAYER), PyTuple_GET_ITEM(end, FLOW_END_LANE), count);
}

/* For each flow end, the innermost slice of its lane (layer, lane) that holds its time, among the
 * 65 that start last at or before it: its index in ``found`` (-1: none); 0, or -1 on error */
static int enclosed(PyObject *slices, PyObject *ends, Py_ssize_t *found) {
    PyObject *lanes = PyDict_New(), *seen_layer = NULL, *seen_lane = NULL;
    Py_ssize_t n_lanes = 0, *sizes = NULL, *caps = NULL, seen_number = -1;
    Member **members = NULL;
    int rc = -1;
    if (!lanes) return -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ends); i++) {  /* the lanes that have ends */
        PyObject *end = PyList_GET_ITEM(ends, i);
        if (!PyTuple_Check(end) || PyTuple_GET_SIZE(end) < FLOW_END_FIELDS) {
            PyErr_SetString(PyExc_TypeError, "not a FlowEnd");
            goto done;
        }
        if (end_lane(lanes, end, &n_lanes) == -2) goto done;
    }
    members = PyMem_Calloc(n_lanes + 1, sizeof(Member *));
    sizes = PyMem_Calloc(n_lanes + 1, sizeof(Py_ssize_t));
    caps = PyMem_Calloc(n_lanes + 1, sizeof(Py_ssize_t));
    if (!members || !sizes || !caps) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(slices); i++) {  /* their slices */
        PyObject *s = PyList_GET_ITEM(slices, i);
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) <= SLICE_DUR_NS) {
            PyErr_SetString(PyExc_TypeError, "not a Slice");
            goto done;
        }
        PyObject *layer = PyTuple_GET_ITEM(s, SLICE_LAYER), *lane_text = PyTuple_GET_ITEM(s, SLICE_LANE);
        if (layer != seen_layer || lane_text != seen_lane) {  /* a lane's slices come in runs: no lookup a slice */
            seen_number = lane_number(lanes, layer, lane_text, NULL);
            if (seen_number == -2) goto done;
            seen_layer = layer, seen_lane = lane_text;
        }
        Py_ssize_t lane = seen_number;
        if (lane == -1) continue;
        long long start = 0, dur = 0;
        if (times_of(s, &start, &dur) < 0) goto done;
        if (sizes[lane] == caps[lane]) {
            caps[lane] = caps[lane] ? caps[lane] * 2 : 64;
            Member *grown = PyMem_Realloc(members[lane], caps[lane] * sizeof(Member));
            if (!grown) { PyErr_NoMemory(); goto done; }
            members[lane] = grown;
        }
        members[lane][sizes[lane]++] = (Member){start, -dur, i};
    }
    for (Py_ssize_t lane = 0; lane < n_lanes; lane++)
        if (sizes[lane] > 1) qsort(members[lane], sizes[lane], sizeof(Member), member_order);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ends); i++) {
        PyObject *end = PyList_GET_ITEM(ends, i);
        Py_ssize_t lane = end_lane(lanes, end, NULL);
        int overflow = 0;
        long long ts = lane >= 0 ? PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(end, FLOW_END_START_NS), &overflow)
                                 : 0;
        if (overflow) PyErr_SetString(PyExc_OverflowError, "a flow end past 2**63 ns");
        if (lane < 0 || PyErr_Occurred()) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "a flow end's lane was not numbered");
            goto done;
        }
        Py_ssize_t low = 0, high = sizes[lane];
        Member *m = members[lane];
        while (low < high) {  /* bisect_right over the starts */
            Py_ssize_t mid = (low + high) / 2;
            if (ts < m[mid].start) high = mid; else low = mid + 1;
        }
        found[i] = -1;
        for (Py_ssize_t j = low - 1; j >= 0 && j >= low - 1 - 64; j--) {
            if (m[j].start <= ts && ts <= m[j].start - m[j].neg_dur) {
                found[i] = m[j].index;
                break;
            }
        }
    }
    rc = 0;
done:
    if (members)
        for (Py_ssize_t lane = 0; lane < n_lanes; lane++) PyMem_Free(members[lane]);
    PyMem_Free(members); PyMem_Free(sizes); PyMem_Free(caps);
    Py_DECREF(lanes);
    return rc;
}

/* enclosing(slices, ends) -> [index or None]: ``enclosed``'s slice of each flow end (the rule:
 * flows.enclosing_rules) */
static PyObject *enclosing(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 2 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "enclosing(slices: list, ends: list)");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(argv[1]), *found = PyMem_Malloc((n + 1) * sizeof(Py_ssize_t));
    PyObject *out = NULL;
    if (!found) return PyErr_NoMemory();
    if (enclosed(argv[0], argv[1], found) == 0 && (out = PyList_New(n)))
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *index = found[i] >= 0 ? PyLong_FromSsize_t(found[i]) : Py_NewRef(Py_None);
            if (!index) { Py_CLEAR(out); break; }
            PyList_SET_ITEM(out, i, index);
        }
    PyMem_Free(found);
    return out;
}

/* bind_ends(slices, ends, pending) -> (arrows, unstarted, last_starts, open_lasts, unended, outside_starts,
 * outside_ends), as flows.bind_ends says (the rule: flows.bind_ends_rules); ``pending``: the keys whose
 * start an earlier step holds open */
typedef struct { long long ts; Py_ssize_t slice; int joined; } Start;

static int start_order(const void *a, const void *b) {
    const Start *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return (x->slice > y->slice) - (x->slice < y->slice);
}

static PyObject *bind_ends(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 3 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[1]) || !PyDict_CheckExact(argv[2])) {
        PyErr_SetString(PyExc_TypeError, "bind_ends(slices: list, ends: list, pending: dict)");
        return NULL;
    }
    Py_ssize_t *found = PyMem_Malloc((PyList_GET_SIZE(argv[1]) + 1) * sizeof(Py_ssize_t));
    if (!found) return PyErr_NoMemory();
    if (enclosed(argv[0], argv[1], found) < 0) { PyMem_Free(found); return NULL; }
    PyObject *ends = argv[1], *pending = argv[2], *groups = PyDict_New(), *keys = PyList_New(0);
    PyObject *arrows = PyList_New(0), *unstarted = PyList_New(0), *last_starts = PyDict_New(), *result = NULL;
    PyObject *open_lasts = PySet_New(NULL);
    Py_ssize_t n = PyList_GET_SIZE(ends), n_groups = 0, *sizes = NULL, *caps = NULL;
    Py_ssize_t unended = 0, outside[2] = {0, 0};  /* outside[1]: starts in no slice, outside[0]: ends */
    Start **starts = PyMem_Calloc(n + 1, sizeof(Start *));
    sizes = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    caps = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    if (!groups || !keys || !arrows || !unstarted || !last_starts || !open_lasts) goto done;
    if (!starts || !sizes || !caps) { PyErr_NoMemory(); goto done; }
    for (int pass = 0; pass < 2; pass++) {  /* the starts of each key, then each finish */
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *end = PyList_GET_ITEM(ends, i);
            Py_ssize_t slice = found[i];
            if (slice < 0 && pass == 1) continue;
            int starts_here = PyObject_IsTrue(PyTuple_GET_ITEM(end, FLOW_END_STARTS));
            if (starts_here < 0) goto done;
            if (slice < 0) { outside[starts_here]++; continue; }  /* counted once, in pass 0 */
            if (starts_here != (pass == 0)) continue;
            PyObject *key = PyTuple_GET_ITEM(end, FLOW_END_KEY), *group = PyDict_GetItemWithError(groups, key);
            if (!group && PyErr_Occurred()) goto done;
            Py_ssize_t g = group ? PyLong_AsSsize_t(group) : -1;
            int overflow = 0;
            long long ts = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(end, FLOW_END_START_NS), &overflow);
            if (overflow) PyErr_SetString(PyExc_OverflowError, "a flow end past 2**63 ns");
            if (PyErr_Occurred()) goto done;
            if (pass == 0) {
                if (g < 0) {
                    PyObject *number = PyLong_FromSsize_t(g = n_groups++);
                    int rc = number ? PyDict_SetItem(groups, key, number) : -1;
                    Py_XDECREF(number);
                    if (rc < 0 || PyList_Append(keys, key) < 0) goto done;
                }
                if (sizes[g] == caps[g]) {
                    caps[g] = caps[g] ? caps[g] * 2 : 2;
                    Start *grown = PyMem_Realloc(starts[g], caps[g] * sizeof(Start));
                    if (!grown) { PyErr_NoMemory(); goto done; }
                    starts[g] = grown;
                }
                starts[g][sizes[g]++] = (Start){ts, slice, 0};
                continue;
            }
            Py_ssize_t low = 0, high = g < 0 ? 0 : sizes[g];
            while (low < high) {  /* the starts at or before the finish */
                Py_ssize_t mid = (low + high) / 2;
                if (ts < starts[g][mid].ts) high = mid; else low = mid + 1;
            }
            /* (key, start, end) or (key, end, a later start or None); no Py_BuildValue: its format is
             * parsed at every call, and this is a call per arrow */
            Py_ssize_t other = low > 0 ? starts[g][low - 1].slice : g >= 0 ? starts[g][0].slice : -1;
            if (low > 0) {
                starts[g][low - 1].joined = 1;
            } else if (g >= 0) {  /* joins the start an earlier step holds open, else its first start here */
                int held = PyDict_Contains(pending, key);
                if (held < 0) goto done;
                if (!held) starts[g][0].joined = 1;
            }
            PyObject *number = other >= 0 ? PyLong_FromSsize_t(other) : Py_NewRef(Py_None), *item = NULL;
            PyObject *at = number ? PyLong_FromSsize_t(slice) : NULL;
            if (at) item = low > 0 ? PyTuple_Pack(3, key, number, at) : PyTuple_Pack(3, key, at, number);
            Py_XDECREF(number); Py_XDECREF(at);
            if (!item || PyList_Append(low > 0 ? arrows : unstarted, item) < 0) { Py_XDECREF(item); goto done; }
            Py_DECREF(item);
        }
        if (pass == 0)
            for (Py_ssize_t g = 0; g < n_groups; g++)
                if (sizes[g] > 1) qsort(starts[g], sizes[g], sizeof(Start), start_order);
    }
    for (Py_ssize_t g = 0; g < n_groups; g++) {
        PyObject *last = PyLong_FromSsize_t(starts[g][sizes[g] - 1].slice);
        int rc = last ? PyDict_SetItem(last_starts, PyList_GET_ITEM(keys, g), last) : -1;
        Py_XDECREF(last);
        if (rc < 0) goto done;
        for (Py_ssize_t j = 0; j < sizes[g] - 1; j++) unended += !starts[g][j].joined;  /* its id used again */
        if (!starts[g][sizes[g] - 1].joined && PySet_Add(open_lasts, PyList_GET_ITEM(keys, g)) < 0) goto done;
    }
    result = Py_BuildValue("(OOOOnnn)", arrows, unstarted, last_starts, open_lasts, unended, outside[1], outside[0]);
done:
    for (Py_ssize_t g = 0; starts && g < n_groups; g++) PyMem_Free(starts[g]);
    PyMem_Free(starts); PyMem_Free(sizes); PyMem_Free(caps);
    PyMem_Free(found); Py_XDECREF(groups); Py_XDECREF(keys);
    Py_XDECREF(arrows); Py_XDECREF(unstarted); Py_XDECREF(last_starts); Py_XDECREF(open_lasts);
    return result;
}

/* -- flows.Linker._arrow: one arrow between two slices -------------------------------------- */

/* BLAKE2b (RFC 7693) with an 8-byte digest and no key: hashlib.blake2b(data, digest_size=8), read
 * as a little-endian int, is what flows.flow_id gives an arrow. */
static const uint64_t B2_IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};
static const uint8_t B2_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};
#define B2_ROTR(x, n) (((x) >> (n)) | ((x) << (64 - (n))))
#define B2_G(r, i, a, b, c, d) do { \
        a += b + m[B2_SIGMA[r][2 * (i)]]; d = B2_ROTR(d ^ a, 32); c += d; b = B2_ROTR(b ^ c, 24); \
        a += b + m[B2_SIGMA[r][2 * (i) + 1]]; d = B2_ROTR(d ^ a, 16); c += d; b = B2_ROTR(b ^ c, 63); \
    } while (0)

static void b2_compress(uint64_t h[8], const uint8_t block[128], uint64_t bytes, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) {
        m[i] = 0;
        for (int j = 7; j >= 0; j--) m[i] = (m[i] << 8) | block[8 * i + j];
    }
    for (int i = 0; i < 8; i++) { v[i] = h[i]; v[i + 8] = B2_IV[i]; }
    v[12] ^= bytes;
    if (last) v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        B2_G(r, 0, v[0], v[4], v[8], v[12]); B2_G(r, 1, v[1], v[5], v[9], v[13]);
        B2_G(r, 2, v[2], v[6], v[10], v[14]); B2_G(r, 3, v[3], v[7], v[11], v[15]);
        B2_G(r, 4, v[0], v[5], v[10], v[15]); B2_G(r, 5, v[1], v[6], v[11], v[12]);
        B2_G(r, 6, v[2], v[7], v[8], v[13]); B2_G(r, 7, v[3], v[4], v[9], v[14]);
    }
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

uint64_t blake2b_64(const uint8_t *data, size_t len) {
    uint64_t h[8];
    uint8_t block[128];
    for (int i = 0; i < 8; i++) h[i] = B2_IV[i];
    h[0] ^= 0x01010000ULL ^ 8;  /* depth 1, fanout 1, no key, 8-byte digest */
    size_t done = 0;
    while (len - done > 128) {  /* every block but the last, which may be full */
        b2_compress(h, data + done, done + 128, 0);
        done += 128;
    }
    memset(block, 0, sizeof block);
    memcpy(block, data + done, len - done);
    b2_compress(h, block, len, 1);
    return h[0];  /* the digest's 8 bytes are h[0] little-endian */
}

/* flow_id(rank, key, k) -> flows.flow_id's int, for a key already made into text */
static PyObject *flow_id(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 1 || !PyUnicode_Check(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "flow_id(text: str)");
        return NULL;
    }
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(argv[0], &n);
    return text ? PyLong_FromUnsignedLongLong(blake2b_64((const uint8_t *)text, (size_t)n)) : NULL;
}

/* slices[index] = slices[index].with_flows(its flows_out + (flow,) or flows_in + (flow,)), the
 * Slice changed in place where the list holds the only reference to it (no one else can see it
 * change: an arrow costs no copy of its slices), else a new one: 0, or -1 on error */
static int add_flow(PyObject *slices, Py_ssize_t index, Py_ssize_t at, PyObject *flow) {
    PyObject *slice = PyList_GET_ITEM(slices, index);
    if (!PyTuple_Check(slice) || PyTuple_GET_SIZE(slice) != SLICE_FIELDS ||
        !PyTuple_Check(PyTuple_GET_ITEM(slice, at))) {
        PyErr_Format(PyExc_TypeError, "not a Slice: %R", slice);
        return -1;
    }
    PyObject *old = PyTuple_GET_ITEM(slice, at), *flows = PyTuple_New(PyTuple_GET_SIZE(old) + 1);
    if (!flows) return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(old); i++)
        PyTuple_SET_ITEM(flows, i, Py_NewRef(PyTuple_GET_ITEM(old, i)));
    PyTuple_SET_ITEM(flows, PyTuple_GET_SIZE(old), Py_NewRef(flow));
    if (Py_REFCNT(slice) == 1) {
        PyTuple_SET_ITEM(slice, at, flows);
        Py_DECREF(old);
        return 0;
    }
    PyObject *made = Py_TYPE(slice)->tp_alloc(Py_TYPE(slice), SLICE_FIELDS);
    if (!made) { Py_DECREF(flows); return -1; }
    for (Py_ssize_t i = 0; i < SLICE_FIELDS; i++)
        PyTuple_SET_ITEM(made, i, i == at ? flows : Py_NewRef(PyTuple_GET_ITEM(slice, i)));
    PyList_SetItem(slices, index, made);
    return 0;
}

/* One arrow from source[first] to target[last], the k-th of its start (join's rules): k + 1 in
 * *made, or k if it would end before it starts (not made); 0, or -1 on error */
static int join(PyObject *source, Py_ssize_t first, PyObject *target, Py_ssize_t last, PyObject *key_text,
                long long k, long long rank, long long *made) {
    if (first < 0 || first >= PyList_GET_SIZE(source) || last < 0 || last >= PyList_GET_SIZE(target)) {
        PyErr_SetString(PyExc_IndexError, "arrow: no such slice");
        return -1;
    }
    PyObject *begin = PyList_GET_ITEM(source, first), *end = PyList_GET_ITEM(target, last);
    if (!PyUnicode_Check(key_text) || !PyTuple_Check(begin) || PyTuple_GET_SIZE(begin) != SLICE_FIELDS ||
        !PyTuple_Check(end) || PyTuple_GET_SIZE(end) != SLICE_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "arrow: not a Slice, or a key that is no str");
        return -1;
    }
    long long begin_ns = 0, end_ns = 0, dur = 0;
    if (times_of(begin, &begin_ns, &dur) < 0 || times_of(end, &end_ns, &dur) < 0) return -1;
    *made = k;
    if (end_ns < begin_ns) return 0;
    Py_ssize_t key_n;
    const char *key = PyUnicode_AsUTF8AndSize(key_text, &key_n);
    if (!key) return -1;
    char small[256], *text = small;
    size_t room = (size_t)key_n + 80;  /* the key, three 64-bit ints, their separators and a NUL */
    if (room > sizeof small && !(text = PyMem_Malloc(room))) { PyErr_NoMemory(); return -1; }
    char *at = decimal(text, rank);  /* "{rank}|{key}@{begin_ns}|{k}", as f"" writes it */
    *at++ = '|';
    memcpy(at, key, (size_t)key_n);
    at += key_n;
    *at++ = '@';
    at = decimal(at, begin_ns);
    *at++ = '|';
    at = decimal(at, k);
    uint64_t id = blake2b_64((const uint8_t *)text, (size_t)(at - text));
    if (text != small) PyMem_Free(text);
    PyObject *flow = PyLong_FromUnsignedLongLong(id);
    /* the arrow in after the arrow out: the same slice, if one, gets both */
    int rc = flow && add_flow(source, first, SLICE_FLOWS_OUT, flow) == 0 ? add_flow(target, last, SLICE_FLOWS_IN, flow) : -1;
    Py_XDECREF(flow);
    *made = k + 1;
    return rc;
}

/* arrow(source, first, target, last, key, k, rank) -> k + 1, or k if the arrow would end before
 * it starts (not made): source[first] gets the arrow out and target[last] the arrow in, with
 * the id flow_id(rank, f"{key}@{source[first].start_ns}", k), as flows.Linker._arrow makes them. */
static PyObject *arrow(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 7 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[2]) || !PyUnicode_Check(argv[4])) {
        PyErr_SetString(PyExc_TypeError, "arrow(source: list, first, target: list, last, key: str, k, rank)");
        return NULL;
    }
    Py_ssize_t first = PyLong_AsSsize_t(argv[1]), last = PyLong_AsSsize_t(argv[3]);
    long long k = PyLong_AsLongLong(argv[5]), rank = PyLong_AsLongLong(argv[6]), made;
    if (PyErr_Occurred()) return NULL;
    return join(argv[0], first, argv[2], last, argv[4], k, rank, &made) < 0 ? NULL : PyLong_FromLongLong(made);
}

/* arrows(slices, bound, made, rank) -> how many would end before they start (not made)
 * The arrows of one step within it (flows.Bound.arrows: (key, start, end) slice indices), in
 * order, as one ``arrow`` call each with k = made.get(start, 0), made[start] = its result. */
static PyObject *arrows(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    if (argc != 4 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[1]) || !PyDict_CheckExact(argv[2])) {
        PyErr_SetString(PyExc_TypeError, "arrows(slices: list, bound: list, made: dict, rank)");
        return NULL;
    }
    PyObject *slices = argv[0], *bound = argv[1], *made = argv[2];
    long long rank = PyLong_AsLongLong(argv[3]), backwards = 0;
    if (PyErr_Occurred()) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(bound); i++) {
        PyObject *item = PyList_GET_ITEM(bound, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != ARROW_FIELDS) {
            PyErr_SetString(PyExc_TypeError, "arrows: bound holds (key, start, end) tuples");
            return NULL;
        }
        PyObject *first = PyTuple_GET_ITEM(item, ARROW_START), *before = PyDict_GetItemWithError(made, first);
        if (!before && PyErr_Occurred()) return NULL;
        long long k = before ? PyLong_AsLongLong(before) : 0, now;
        Py_ssize_t start = PyLong_AsSsize_t(first), end = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, ARROW_END));
        if (PyErr_Occurred() || join(slices, start, slices, end, PyTuple_GET_ITEM(item, ARROW_KEY), k, rank, &now) < 0)
            return NULL;
        backwards += now == k;
        PyObject *count = PyLong_FromLongLong(now);
        int rc = count ? PyDict_SetItem(made, first, count) : -1;
        Py_XDECREF(count);
        if (rc < 0) return NULL;
    }
    return PyLong_FromLongLong(backwards);
}


PyMethodDef FLOWS_METHODS[] = {
    {"enclosing", (PyCFunction)(void (*)(void))enclosing, METH_FASTCALL,
     "enclosing(slices, ends) -> for each flow end the index of its slice, or None"},
    {"bind_ends", (PyCFunction)(void (*)(void))bind_ends, METH_FASTCALL,
     "bind_ends(slices, ends, pending) -> flows.Bound of flows.bind_ends"},
    {"flow_id", (PyCFunction)(void (*)(void))flow_id, METH_FASTCALL,
     "flow_id(text) -> the int of the 8-byte BLAKE2b digest of text (little-endian)"},
    {"arrow", (PyCFunction)(void (*)(void))arrow, METH_FASTCALL,
     "arrow(source, first, target, last, key, k, rank) -> k + 1, or k if the arrow would run backwards"},
    {"arrows", (PyCFunction)(void (*)(void))arrows, METH_FASTCALL,
     "arrows(slices, bound, made, rank) -> how many would run backwards: one step's arrows, as arrow does each"},
    {NULL, NULL, 0, NULL},
};
