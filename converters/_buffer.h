/* A byte buffer that grows as it is written, for the C modules that write bytes (the writers,
 * the step spill). Included by their .c files; MANIFEST.in takes it into a source distribution. */
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

#endif
