/* A byte buffer that grows as it is written, for the C modules that write bytes (the writers,
 * the step spill, the critical path's columns of int64), and ints written in decimal. Included by
 * their .c files; MANIFEST.in takes it into a source distribution. */
#ifndef TRACE2PERFETTO_BUFFER_H
#define TRACE2PERFETTO_BUFFER_H
#include <Python.h>
#include <string.h>

typedef struct { char *data; Py_ssize_t len, cap; } Buf;

/* Room for ``more`` bytes past ``len``: 0, or -1 with MemoryError set */
static inline int buf_reserve(Buf *b, Py_ssize_t more) {
    if (b->len + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more) cap *= 2;
    char *data = PyMem_Realloc(b->data, cap);
    if (!data) { PyErr_NoMemory(); return -1; }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const char *src, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

/* Ints in decimal as "%lld" and str() write them, by hand: snprintf's format parsing cost more than
 * the digits (an arrow's text, an arg's value) */
#define DECIMAL_ROOM 24  /* bytes any int64 takes, its sign included */

/* The digits of ``value``, written back from ``end``: where they start */
static inline char *digits_before(char *end, unsigned long long value) {
    do *--end = (char)('0' + value % 10); while (value /= 10);
    return end;
}

/* ``v`` in decimal at ``p`` (DECIMAL_ROOM bytes of room; no NUL): past its last digit */
static inline char *decimal(char *p, long long v) {
    char text[DECIMAL_ROOM], *end = text + sizeof text;
    char *at = digits_before(end, v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v);
    if (v < 0) *--at = '-';
    memcpy(p, at, (size_t)(end - at));
    return p + (end - at);
}

static inline int buf_decimal(Buf *b, long long v) {
    if (buf_reserve(b, DECIMAL_ROOM) < 0) return -1;
    b->len = decimal(b->data + b->len, v) - b->data;
    return 0;
}

#endif
