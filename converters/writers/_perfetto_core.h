/* What the C files of converters.writers._perfetto_core share, private to them (MANIFEST.in takes
 * it into a source distribution). One extension module, one .c file per concern:
 * - _perfetto_core.c: the module, a call's State, the string tables' interning, one argument's
 *   DebugAnnotation (put_annotation), and the TracePackets of slice begins, ends and counter values;
 * - _perfetto_args.c: a slice's args as annotations (put_args): a dict's, or raw JSON's, walked with
 *   no dict made (walk_args) and remembered per sequence by its text.
 * What a file takes from the other is declared here, prefixed ``pf_``. */
#ifndef TRACE2PERFETTO_WRITERS_PERFETTO_CORE_H
#define TRACE2PERFETTO_WRITERS_PERFETTO_CORE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_buffer.h"

/* Seen by the other file of the module, not outside it: only PyInit__perfetto_core is exported */
#define PF_PRIVATE __attribute__((visibility("hidden")))

static inline int buf_bytes(Buf *b, PyObject *bytes) {  /* append a bytes object */
    return buf_put(b, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes));
}

static inline int buf_varint(Buf *b, unsigned long long v) {
    if (buf_reserve(b, 10) < 0) return -1;
    unsigned char *p = (unsigned char *)b->data + b->len;
    while (v >= 0x80) { *p++ = (unsigned char)(v | 0x80); v >>= 7; }
    *p++ = (unsigned char)v;
    b->len = (char *)p - b->data;
    return 0;
}

/* keys: field << 3 | wire type (the others in _perfetto_core.c) */
#define K_A_DOUBLE 0x29      /* DebugAnnotation.double_value (5), fixed64 */
#define K_A_INT 0x20         /* DebugAnnotation.int_value (4), varint */
#define K_A_BOOL 0x10        /* DebugAnnotation.bool_value (2), varint */

#define MAX_INTERNED (1 << 13)   /* strings interned per sequence and table, args cached: bounds memory */
#define MAX_RAW_CACHED (1 << 12) /* raw args remembered per sequence (most never repeat) */
#define MAX_DEPTH 64   /* nested values deeper than this are left to Python (orjson's limit is 255) */

/* One of a sequence's string tables (a perfetto._Interner): text -> reference, the definitions
 * still to write, and its fields. */
typedef struct {
    PyObject *interner, *refs, *pending, *ref_key;  /* the object, a dict, a bytearray, bytes */
    unsigned long table_field, inline_field;
} Table;

/* What one call works with: the sequence's state (perfetto._Sequence) and the Python helpers. */
typedef struct {
    PyObject *tracks;
    Table names, arg_names, strings;
    PyObject *arg_cache, *tail;
    PyObject *annotation;  /* perfetto._annotation(key, value, seq) -> bytes: the rare cases */
    PyObject *decode;      /* raw JSON args -> their value */
    PyObject *seq;
    PyObject *last_track, *last_prefixes;  /* the track an event was last on: most run on one */
    struct MemberCache *members, *raws;    /* the sequence's (``raw_caches``), once raw args come */
    int touched;           /* a string was interned, or Python called: new strings to define? */
} State;

/* -- _perfetto_core.c ---------------------------------------------------------------------------- */

/* An interned string's reference (``field: iid`` bytes), interning it if new. New reference. */
PF_PRIVATE PyObject *pf_ref(State *st, Table *t, PyObject *text);
/* One argument's DebugAnnotation after what ``b`` holds, as perfetto._annotation writes it */
PF_PRIVATE int pf_put_annotation(State *st, Buf *b, PyObject *key, PyObject *value);
/* A string annotation, as _annotation writes one, with no ``arg_cache`` */
PF_PRIVATE int pf_put_text(State *st, Buf *b, PyObject *key, PyObject *text);

/* -- _perfetto_args.c ---------------------------------------------------------------------------- */

/* A slice's args (a dict, or raw JSON: bytes, msgspec.Raw) as annotations after what ``b`` holds */
PF_PRIVATE int pf_put_args(State *st, Buf *b, PyObject *args);

#endif
