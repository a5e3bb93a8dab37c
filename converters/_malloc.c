/* glibc's malloc told to keep freed memory for reuse (executor.reuse_freed_memory), in C: through
 * ctypes, loading ctypes and libffi was 2 ms of a small command's start-up (issue 44).
 *
 * reuse_freed_memory() -> bool: blocks below 32 MiB served from the heap (M_MMAP_THRESHOLD), the
 * heap trimmed only past 64 MiB free (M_TRIM_THRESHOLD); False, and nothing changed, off glibc.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

static PyObject *reuse_freed_memory(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef methods[] = {
    {"reuse_freed_memory", reuse_freed_memory, METH_NOARGS,
     "Keep freed memory for reuse (glibc's mallopt); False where malloc is not glibc's."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_malloc", .m_doc = "glibc's malloc settings.", .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__malloc(void) { return PyModule_Create(&module); }
