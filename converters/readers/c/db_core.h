/* What the C files of converters.readers._db_core share, private to them (MANIFEST.in takes it into
 * a source distribution). One extension module, one .c file per Python module it speeds up:
 * - _db_core.c: the module, and the slice makers the others share;
 * - ascend_db_flows.c: ascend_db_flows.Flows.bind_rules' arrows (bind);
 * - ascend_db_rows.c: ascend_db._Reader's TASK and host API rows into slices (Rows), counter and
 *   memory rows into samples (samples);
 * - ascend_db_steps.c: ascend_db._by_step's merge of the scans, filed by step (fill).
 * Each Python rule a routine copies, and the test holding the C to it: docs/architecture.md, "The C
 * and the Python it copies". */
#ifndef TRACE2PERFETTO_READERS_DB_CORE_H
#define TRACE2PERFETTO_READERS_DB_CORE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../../_buffer.h"
#include "../../records.h"

/* Seen by the other files of the module, not outside it: only PyInit__db_core is exported */
#define DB_PRIVATE __attribute__((visibility("hidden")))

/* Each file's functions, which PyInit__db_core adds to the module */
extern DB_PRIVATE PyMethodDef FLOWS_METHODS[], ROWS_METHODS[], STEPS_METHODS[];
DB_PRIVATE int rows_ready(PyObject *module);  /* sqlite3's errors taken, Rows added: 0, or -1 on error */

/* A Slice no longer in the collector's care where its args hold no container (_db_core.c) */
DB_PRIVATE void untrack(PyObject *s);
/* A Slice of ``type``: tuple.__new__(type, (rank, layer, lane, name, start, dur, args, task_type, (), ())),
 * the references to ``start``, ``dur`` and ``args`` taken over (NULL: an error already set) */
DB_PRIVATE PyObject *new_slice(PyTypeObject *type, PyObject *rank, PyObject *layer, PyObject *lane, PyObject *name,
                               PyObject *start, PyObject *dur, PyObject *args, PyObject *task_type);
/* out.append(made), ``made`` a new reference (NULL: an error already raised), released: 0, or -1 */
DB_PRIVATE int append_made(PyObject *out, PyObject *made);

#endif
