/* ascend_db._Reader's rows in C: the TASK and host API rows SQLite says are as expected made into
 * their slices (Rows: tasks, host), until a row the rules must read (ascend_db._Reader._task_rules,
 * _host_slice); counter and memory rows into samples (samples: ascend_db's and ascend_db_memory's
 * rules). tests/readers/test_ascend_db_rows.py and test_ascend_db_core.py hold each to its rules. */
#include "db_core.h"

#include <limits.h>
#include <sqlite3.h>
#include <string.h>

/* -- rows read from SQLite straight into slices ------------------------------------------------- */

/* The rows of one query, stepped on a connection of our own (read-only, on the URI sqlite.read_only
 * opened), made into slices without a Python tuple per row; string ids resolved through STRING_IDS
 * once each (a cache of the ids met), not by a join per string column. The sqlite3 module built ~40
 * objects a row and SQLite looked up ten strings a row: most of a rank's reading (BENCHMARKS.md,
 * issue 28, session 14). */

static PyObject *database_error, *operational_error;  /* sqlite3's: sqlite.DAMAGED catches ours */

/* An SQLite error as the sqlite3 module raises it: OperationalError for what the system did (I/O,
 * busy, cannot open), DatabaseError for the rest ("database disk image is malformed") */
static void raise_sqlite(sqlite3 *db, int code) {
    const char *message = db ? sqlite3_errmsg(db) : sqlite3_errstr(code);
    switch (code & 0xFF) {
    case SQLITE_NOMEM:
        PyErr_NoMemory();
        return;
    case SQLITE_ERROR: case SQLITE_PERM: case SQLITE_ABORT: case SQLITE_BUSY: case SQLITE_LOCKED:
    case SQLITE_READONLY: case SQLITE_INTERRUPT: case SQLITE_IOERR: case SQLITE_FULL: case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL: case SQLITE_EMPTY: case SQLITE_SCHEMA:
        PyErr_SetString(operational_error, message);
        return;
    default:
        PyErr_SetString(database_error, message);
    }
}

/* A column as the sqlite3 module makes it (a TEXT that is no UTF-8: its OperationalError) */
static PyObject *value_of(sqlite3_stmt *st, int i) {
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_NULL:
        Py_RETURN_NONE;
    case SQLITE_INTEGER:
        return PyLong_FromLongLong(sqlite3_column_int64(st, i));
    case SQLITE_FLOAT:
        return PyFloat_FromDouble(sqlite3_column_double(st, i));
    case SQLITE_TEXT: {
        const char *text = (const char *)sqlite3_column_text(st, i);
        if (!text) return PyErr_NoMemory();
        PyObject *s = PyUnicode_DecodeUTF8(text, sqlite3_column_bytes(st, i), NULL);
        if (!s && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            PyErr_Format(operational_error, "Could not decode to UTF-8 column '%s' with text '%s'",
                         sqlite3_column_name(st, i), text);
        }
        return s;
    }
    default:
        return PyBytes_FromStringAndSize(sqlite3_column_blob(st, i), sqlite3_column_bytes(st, i));
    }
}

/* What the join with STRING_IDS made of an integer id: its TEXT (``text``), another value held for it,
 * or NULL for none (the id itself) */
typedef struct {
    long long id;
    PyObject *value;
    int used, text;
} Entry;

#define MAX_ARGS 32

typedef struct {
    PyObject_HEAD
    sqlite3 *db;
    sqlite3_stmt *rows, *lookup;  /* the query; STRING_IDS' value by id (NULL: the file has none) */
    Entry *cache;                 /* open addressing, ``size`` a power of two, at most half full */
    size_t size, count;
    int mixed;                    /* ids placed by a hash, not by value (slot) */
    int columns, batch;
    long long offset;             /* the clock offset bound to the query's :offset */
    char *strings;                /* per column: it holds a string id */
    PyObject **values;            /* per column: the row's value, made once (or NULL) */
    PyObject *keys;               /* the args' keys ``names`` holds the JSON of (``"key":``, from name_at[i]) */
    Buf names;
    Py_ssize_t name_at[MAX_ARGS + 1];
    unsigned long long link_keys; /* the places of "connection_id" in the keys, a bit each */
} Rows;

/* STRING_IDS' value for ``id`` compared as the join compared it: *found a new reference (NULL for no
 * row or a NULL value), *text whether it is TEXT */
static int lookup(Rows *r, sqlite3_value *id, PyObject **found, int *text) {
    sqlite3_stmt *q = r->lookup;
    *found = NULL;
    *text = 0;
    int rc = sqlite3_bind_value(q, 1, id);
    if (rc == SQLITE_OK) rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        int type = sqlite3_column_type(q, 0);
        *text = type == SQLITE_TEXT;
        if (type != SQLITE_NULL && !(*found = value_of(q, 0))) {
            sqlite3_reset(q);
            return -1;
        }
        rc = SQLITE_DONE;  /* ids are STRING_IDS' primary key */
    }
    if (rc != SQLITE_DONE) {
        raise_sqlite(r->db, rc);
        sqlite3_reset(q);
        return -1;
    }
    sqlite3_reset(q);
    return 0;
}

/* The entry of ``id``, or the empty one where it goes. The ids are placed by their value (``mixed``
 * 0), where STRING_IDS numbers its strings 0, 1, 2... in the order written, as the profilers do:
 * the ids of rows read in time order then lie side by side, and a rank's 50,000 strings missed the
 * CPU's cache at each lookup when hashed; by a hash once ids placed by value collide (``*probes``
 * past MAX_PROBES: ids far apart, a multiple of the table's size). */
#define MAX_PROBES 32

static Entry *slot(Entry *cache, size_t size, long long id, int mixed, int *probes) {
    size_t h = mixed ? (size_t)(((unsigned long long)id * 0x9E3779B97F4A7C15ULL) >> 32) : (size_t)id;
    for (*probes = 0;; h++, ++*probes) {
        Entry *e = &cache[h & (size - 1)];
        if (!e->used || e->id == id) return e;
    }
}

/* The cache rebuilt in ``size`` entries, placed by a hash where ``mixed`` */
static int rehash(Rows *r, size_t size, int mixed) {
    Entry *grown = PyMem_Calloc(size, sizeof(Entry));
    if (!grown) return PyErr_NoMemory(), -1;
    int probes;
    for (size_t i = 0; i < r->size; i++)
        if (r->cache[i].used) *slot(grown, size, r->cache[i].id, mixed, &probes) = r->cache[i];
    PyMem_Free(r->cache);
    r->cache = grown;
    r->size = size;
    r->mixed = mixed;
    return 0;
}

/* The cache's entry for ``id``, looked up in STRING_IDS the first time it is met */
static Entry *cached(Rows *r, sqlite3_value *value) {
    long long id = sqlite3_value_int64(value);
    int probes;
    Entry *e = slot(r->cache, r->size, id, r->mixed, &probes);
    if (e->used) return e;
    int grow = (r->count + 1) * 2 > r->size, mix = !r->mixed && probes > MAX_PROBES;
    if (grow || mix) {
        if (rehash(r, grow ? r->size * 2 : r->size, r->mixed || mix) < 0) return NULL;
        e = slot(r->cache, r->size, id, r->mixed, &probes);
    }
    if (lookup(r, value, &e->value, &e->text) < 0) return NULL;
    e->id = id;
    e->used = 1;
    r->count++;
    return e;
}

/* COALESCE(s.value, column) of the join with STRING_IDS for string column i, *unresolved set where it
 * is no TEXT (an id STRING_IDS lacks: the rules count it) or NULL. A TEXT column (some versions
 * store the text) is looked up as the join would, and is itself where STRING_IDS lacks it. */
static PyObject *string_of(Rows *r, int i, int *unresolved) {
    sqlite3_stmt *st = r->rows;
    int type = sqlite3_column_type(st, i);
    if (type == SQLITE_NULL) Py_RETURN_NONE;
    if (!r->lookup) {
        *unresolved |= type != SQLITE_TEXT;
        return value_of(st, i);
    }
    PyObject *found;
    int text;
    if (type == SQLITE_INTEGER) {
        Entry *e = cached(r, sqlite3_column_value(st, i));
        if (!e) return NULL;
        *unresolved |= !e->text;
        if (!e->value) return PyLong_FromLongLong(e->id);
        Py_INCREF(e->value);
        return e->value;
    }
    if (lookup(r, sqlite3_column_value(st, i), &found, &text) < 0) return NULL;
    if (found) {
        *unresolved |= !text;
        return found;
    }
    *unresolved |= type != SQLITE_TEXT;
    return value_of(st, i);
}

/* Column i of the row (borrowed): made once a row */
static PyObject *get(Rows *r, int i) {
    int unresolved = 0;
    if (!r->values[i]) r->values[i] = r->strings[i] ? string_of(r, i, &unresolved) : value_of(r->rows, i);
    return r->values[i];
}

/* Every string column of the row resolved: 1 if one is no TEXT or NULL, -1 on error */
static int resolve(Rows *r) {
    int unresolved = 0;
    for (int i = 0; i < r->columns; i++)
        if (r->strings[i] && !r->values[i] && !(r->values[i] = string_of(r, i, &unresolved))) return -1;
    return unresolved;
}

/* The next row: 1, or 0 past the last (the connection closed then), -1 on error */
static void rows_close(Rows *r);

static int next_row(Rows *r) {
    for (int i = 0; i < r->columns; i++) Py_CLEAR(r->values[i]);
    int rc = sqlite3_step(r->rows);
    if (rc == SQLITE_ROW) return 1;
    if (rc == SQLITE_DONE) {
        rows_close(r);
        return 0;
    }
    raise_sqlite(r->db, rc);
    return -1;
}

/* The row as the sqlite3 module would give it (its strings resolved as the join did): for the rules */
static PyObject *row_tuple(Rows *r) {
    PyObject *row = PyTuple_New(r->columns);
    for (int i = 0; row && i < r->columns; i++) {
        PyObject *value = get(r, i);
        if (!value) Py_CLEAR(row);
        else PyTuple_SET_ITEM(row, i, (Py_INCREF(value), value));
    }
    return row;
}

static void rows_close(Rows *r) {
    for (int i = 0; r->values && i < r->columns; i++) Py_CLEAR(r->values[i]);
    for (size_t i = 0; r->cache && i < r->size; i++) Py_XDECREF(r->cache[i].value);
    PyMem_Free(r->cache); PyMem_Free(r->values); PyMem_Free(r->strings); PyMem_Free(r->names.data);
    r->cache = NULL; r->values = NULL; r->strings = NULL; r->names.data = NULL;
    Py_CLEAR(r->keys);
    sqlite3_finalize(r->rows); sqlite3_finalize(r->lookup);
    sqlite3_close(r->db);
    r->rows = r->lookup = NULL; r->db = NULL;
}

static void rows_dealloc(Rows *r) {
    rows_close(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

/* Rows(uri, sql, offset, strings, string_ids, batch): ``sql``'s rows (``:offset`` bound to offset) on
 * a read-only connection to ``uri``; ``strings`` the places of its columns of string ids, resolved
 * through STRING_IDS if ``string_ids`` (else only TEXT is a string); ``batch`` rows a call. */
static PyObject *rows_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    const char *sql;
    long long offset;
    PyObject *uri, *strings;  /* uri: its bytes as the sqlite3 module passes them (a path that is no UTF-8) */
    int string_ids, batch;
    if ((kwargs && PyDict_GET_SIZE(kwargs)) ||
        !PyArg_ParseTuple(args, "O&sLO!pi", PyUnicode_FSConverter, &uri, &sql, &offset, &PyTuple_Type, &strings,
                          &string_ids, &batch))
        return NULL;
    Rows *r = (Rows *)type->tp_alloc(type, 0);
    if (!r) {
        Py_DECREF(uri);
        return NULL;
    }
    r->batch = batch > 0 ? batch : 1;
    r->offset = offset;
    /* no mutex: one thread, the GIL's holder, steps the connection */
    int flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX;
    int rc = sqlite3_open_v2(PyBytes_AS_STRING(uri), &r->db, flags, NULL);
    Py_DECREF(uri);
    if (rc == SQLITE_OK) rc = sqlite3_prepare_v2(r->db, sql, -1, &r->rows, NULL);
    if (rc == SQLITE_OK && string_ids)
        rc = sqlite3_prepare_v2(r->db, "SELECT value FROM STRING_IDS WHERE id = ?", -1, &r->lookup, NULL);
    int at = rc == SQLITE_OK ? sqlite3_bind_parameter_index(r->rows, ":offset") : 0;
    if (at > 0) rc = sqlite3_bind_int64(r->rows, at, offset);
    if (rc != SQLITE_OK) {
        raise_sqlite(r->db, rc);
        Py_DECREF(r);
        return NULL;
    }
    r->columns = sqlite3_column_count(r->rows);
    r->size = 1024;
    r->cache = PyMem_Calloc(r->size, sizeof(Entry));
    r->values = PyMem_Calloc(r->columns ? r->columns : 1, sizeof(PyObject *));
    r->strings = PyMem_Calloc(r->columns ? r->columns : 1, 1);
    if (!r->cache || !r->values || !r->strings) {
        Py_DECREF(r);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(strings); i++) {
        Py_ssize_t column = PyLong_AsSsize_t(PyTuple_GET_ITEM(strings, i));
        if (column < 0 || column >= r->columns) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Rows: a string column the query lacks");
            Py_DECREF(r);
            return NULL;
        }
        r->strings[column] = 1;
    }
    return (PyObject *)r;
}

/* ``a or b``: a new reference to the first true one, else to ``b`` (NULL on error) */
static PyObject *either(PyObject *a, PyObject *b) {
    int true_ = PyObject_IsTrue(a);
    if (true_ < 0) return NULL;
    PyObject *chosen = true_ ? a : b;
    Py_INCREF(chosen);
    return chosen;
}

/* lanes.get(key) or lanes.setdefault(key, made): ``made`` formatted only for a new key (borrowed) */
static PyObject *lane_of(PyObject *lanes, PyObject *key, const char *format, PyObject *a, PyObject *b) {
    PyObject *lane = PyDict_GetItemWithError(lanes, key);
    if (lane || PyErr_Occurred()) return lane;
    PyObject *made = b ? PyUnicode_FromFormat(format, a, b) : PyUnicode_FromFormat(format, a);
    if (!made) return NULL;
    int rc = PyDict_SetItem(lanes, key, made);
    Py_DECREF(made);
    return rc < 0 ? NULL : made;  /* the dict holds it */
}

/* A value drawn as no arg: None, "" or "N/A" (what ascend_db._Reader._device_task leaves out) */
static int nothing(PyObject *value) {
    if (value == Py_None) return 1;
    if (!PyUnicode_CheckExact(value)) return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(value);
    return n == 0 || (n == 3 && PyUnicode_CompareWithASCIIString(value, "N/A") == 0);
}

/* -- a slice's args as raw JSON text ---------------------------------------------------------- */

/* A row's args are JSON text (bytes), as the Chrome-trace reader's are, not a dict: the text
 * orjson.dumps makes of the dict the rules make (the Chrome JSON writer's output), read by the
 * Perfetto writer with no dict made (``walk_args``). A dict per slice, filled, walked and freed was a
 * tenth of a rank's conversion (BENCHMARKS.md, issue 28). Only ints and strs are written so; a row
 * with any other value (a REAL, a BLOB, a connection_id that is no int) keeps its dict. */
static Buf json;  /* reused by every slice (the GIL held) */

/* ``value`` as a JSON string, escaped as orjson escapes (\b \t \n \f \r, other controls \u00xx) */
static int json_string(Buf *t, PyObject *value) {
    static const char hex[] = "0123456789abcdef";
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(value, &n), *run;
    if (!p || buf_put(t, "\"", 1) < 0) return -1;
    const char *end = p + n;
    for (run = p; p < end; p++) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        char escaped[6] = {'\\', (char)c, 0};
        size_t len = 2;
        switch (c) {
        case '"': case '\\': break;
        case '\b': escaped[1] = 'b'; break;
        case '\t': escaped[1] = 't'; break;
        case '\n': escaped[1] = 'n'; break;
        case '\f': escaped[1] = 'f'; break;
        case '\r': escaped[1] = 'r'; break;
        default:
            memcpy(escaped + 1, "u00", 3);
            escaped[4] = hex[c >> 4];
            escaped[5] = hex[c & 15];
            len = 6;
        }
        if (buf_put(t, run, p - run) < 0 || buf_put(t, escaped, len) < 0) return -1;
        run = p + 1;
    }
    return buf_put(t, run, p - run) < 0 || buf_put(t, "\"", 1) < 0 ? -1 : 0;
}

/* ``value`` (an int) in decimal: 0, or 1 where it is past int64 */
static int json_int(Buf *t, PyObject *value) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) return 1;
    if (v == -1 && PyErr_Occurred()) return -1;
    return buf_decimal(t, v);
}

/* A slice's args: n keys and their values (borrowed), a NULL value the int of its row's ``columns[i]``
 * (the INTEGER of a column that holds no string id: written from SQLite, no int made for it) */
typedef struct {
    PyObject *names[MAX_ARGS], *values[MAX_ARGS];
    int columns[MAX_ARGS], keys[MAX_ARGS];  /* keys: the name's place in the keys */
    Py_ssize_t n;
} Args;

/* The JSON of ``keys``' names into r->names (``"key":`` each), unless it holds theirs already */
static int names_of(Rows *r, PyObject *keys) {
    if (r->keys == keys) return 0;
    Py_CLEAR(r->keys);
    r->names.len = 0;
    r->link_keys = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); i++) {
        r->name_at[i] = r->names.len;
        PyObject *key = PyTuple_GET_ITEM(keys, i);
        if (!PyUnicode_Check(key)) {
            PyErr_SetString(PyExc_TypeError, "Rows: an arg's key is no str");
            return -1;
        }
        if (PyUnicode_CompareWithASCIIString(key, "connection_id") == 0) r->link_keys |= 1ULL << i;
        if (json_string(&r->names, key) < 0 || buf_put(&r->names, ":", 1) < 0) return -1;
    }
    r->name_at[PyTuple_GET_SIZE(keys)] = r->names.len;
    r->keys = (Py_INCREF(keys), keys);
    return 0;
}

/* The args as JSON text (new reference); NULL with no error set where a value is neither an int nor
 * a str, or connection_id no int: the dict made instead */
static PyObject *args_json(Rows *r, const Args *a) {
    json.len = 0;
    for (Py_ssize_t i = 0; i < a->n; i++) {
        PyObject *value = a->values[i];
        Py_ssize_t at = r->name_at[a->keys[i]];
        if (buf_put(&json, i ? "," : "{", 1) < 0 ||
            buf_put(&json, r->names.data + at, r->name_at[a->keys[i] + 1] - at) < 0)
            return NULL;
        int rc;
        if (!value) rc = buf_decimal(&json, sqlite3_column_int64(r->rows, a->columns[i]));
        else if (PyLong_CheckExact(value)) rc = json_int(&json, value);
        else if (PyUnicode_CheckExact(value) && !(r->link_keys >> a->keys[i] & 1))
            rc = json_string(&json, value);
        else rc = 1;
        if (rc) return NULL;
    }
    if (buf_put(&json, "}", 1) < 0) return NULL;
    return PyBytes_FromStringAndSize(json.data, json.len);
}

/* The args' JSON text, else their dict (none: an empty dict, no args) */
static PyObject *args_made(Rows *r, Args *a) {
    PyObject *made = a->n ? args_json(r, a) : NULL;
    if (made || PyErr_Occurred()) return made;
    PyObject *args = PyDict_New();
    for (Py_ssize_t i = 0; args && i < a->n; i++) {
        PyObject *value = a->values[i] ? a->values[i] : get(r, a->columns[i]);
        if (!value || PyDict_SetItem(args, a->names[i], value) < 0) Py_CLEAR(args);
    }
    return args;
}

/* The pairs of ``keys`` and the row's columns from ``at`` on, but those that say nothing (or, if
 * ``only_none``, but None): 0, or -1 on error */
static int args_of(Rows *r, int at, PyObject *keys, Py_ssize_t count, int only_none, Args *a) {
    a->n = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int column = at + (int)i;
        PyObject *value = NULL;
        if (r->values[column] || r->strings[column] || sqlite3_column_type(r->rows, column) != SQLITE_INTEGER) {
            if (!(value = get(r, column))) return -1;
            if (only_none ? value == Py_None : nothing(value)) continue;
        }
        a->names[a->n] = PyTuple_GET_ITEM(keys, i);
        a->keys[a->n] = (int)i;
        a->columns[a->n] = column;
        a->values[a->n++] = value;
    }
    return 0;
}

static int places(PyObject *spec_places, int *at, int count, int columns) {
    if (!PyTuple_Check(spec_places) || PyTuple_GET_SIZE(spec_places) != count) return -1;
    for (int i = 0; i < count; i++) {
        long place = PyLong_AsLong(PyTuple_GET_ITEM(spec_places, i));
        if (place < 0 || place >= columns) return -1;
        at[i] = (int)place;
    }
    return 0;
}

static int is_empty(PyObject *value) { return PyUnicode_CheckExact(value) && PyUnicode_GET_LENGTH(value) == 0; }

#define LIMIT_NS (TIME_LIMIT_NS - 1)

/* Whether ``ns`` + ``offset`` is a time the model holds (model.checked_ns: within ±LIMIT_NS), into *shifted */
static int shifted_ok(long long ns, long long offset, long long *shifted) {
    return !__builtin_add_overflow(ns, offset, shifted) && *shifted >= -LIMIT_NS && *shifted <= LIMIT_NS;
}

/* A time column as an int64: an INTEGER, or a TEXT that spells one as SQLite prints it (torch_npu writes
 * PYTORCH_API's times as TEXT in some versions: the largest table of a real database); 0 for any other
 * value, which the rules read (int() takes " 7" and "007" too). In SQL, the same test was a third of
 * SQLite's work on PYTORCH_API's query. */
static int column_time(sqlite3_stmt *st, int i, long long *out) {
    int type = sqlite3_column_type(st, i);
    if (type == SQLITE_INTEGER) {
        *out = sqlite3_column_int64(st, i);
        return 1;
    }
    if (type != SQLITE_TEXT) return 0;
    const unsigned char *text = sqlite3_column_text(st, i);
    int n = sqlite3_column_bytes(st, i), negative = n > 0 && text[0] == '-', at = negative;
    if (!text || at >= n || (text[at] == '0' && (negative || n - at > 1))) return 0;  /* "", "-", "-0", "07" */
    long long value = 0;
    for (; at < n; at++) {
        int digit = text[at] - '0';
        if (digit < 0 || digit > 9 || __builtin_mul_overflow(value, 10, &value) ||
            __builtin_add_overflow(value, negative ? -digit : digit, &value))
            return 0;
    }
    *out = value;
    return 1;
}

/* Whether the row's times and its stream or thread are as expected, what SQLite's ``typeof(startNs) =
 * 'integer' AND typeof(endNs) = 'integer' AND endNs >= startNs AND startNs + :offset BETWEEN -LIMIT AND
 * LIMIT AND endNs - startNs <= LIMIT AND typeof(id) = 'integer'`` says (a sum past int64 is out of range
 * there too: SQLite makes it a REAL), read from the columns: evaluated in the query, per row, those
 * terms were a sixth of SQLite's work on the TASK query */
static int times_ok(Rows *r, int start, int end, int id) {
    sqlite3_stmt *st = r->rows;
    long long s, e, shifted, dur;
    if (!column_time(st, start, &s) || !column_time(st, end, &e) || sqlite3_column_type(st, id) != SQLITE_INTEGER)
        return 0;
    return e >= s && shifted_ok(s, r->offset, &shifted) && !__builtin_sub_overflow(e, s, &dur) &&
           dur <= LIMIT_NS;
}

/* The TASK query's columns (ascend_db._TASK_COLUMNS) are read at the places a TaskSpec's places give
 * (ascend_db_specs.TaskPlaces, ``at`` here: records.h TASK_PLACES_*): the args from ARGS_AT to ARGS_END (the
 * task's own to TASK_ARGS_END), the task type drawn (TASK_TYPE: C sets it from the compute info's
 * C_TYPE and the task's TYPE), the compute info's name, the task's own startNs and endNs (START_NS,
 * END_NS: for times_ok) */
#define COMPUTE_KIND 1
#define COMM_KIND 2

/* An as-expected row of the TASK query as its Slice: what ascend_db._Reader._task_rules makes of it */
static PyObject *task_slice(Rows *r, const int *at, long long kind, PyObject *spec, PyObject *rank,
                            PyObject *lanes) {
    static PyObject *task, *empty;
    if (!task && !(task = PyUnicode_InternFromString("Task"))) return NULL;
    if (!empty && !(empty = PyUnicode_InternFromString(""))) return NULL;
    PyObject *keys = PyTuple_GET_ITEM(spec, TASK_SPEC_KEYS), *stream = get(r, at[TASK_PLACES_STREAM]);
    PyObject *lane = stream ? lane_of(lanes, stream, "Stream %S", stream, NULL) : NULL;
    int args_end = kind == COMPUTE_KIND ? at[TASK_PLACES_ARGS_END] : at[TASK_PLACES_TASK_ARGS_END];
    Args a;
    int ok = lane && args_of(r, at[TASK_PLACES_ARGS_AT], keys, args_end - at[TASK_PLACES_ARGS_AT], 0, &a) == 0;
    PyObject *args = ok ? args_made(r, &a) : NULL;
    PyObject *task_type = args ? either(r->values[at[TASK_PLACES_TASK_TYPE]], empty) : NULL, *name = NULL;
    PyObject *c_name = task_type ? get(r, at[TASK_PLACES_NAME]) : NULL;
    if (c_name) {
        PyObject *named = either(c_name, task_type);
        name = named ? either(named, task) : NULL;
        Py_XDECREF(named);
    }
    PyObject *start = name ? get(r, at[TASK_PLACES_START]) : NULL, *dur = start ? get(r, at[TASK_PLACES_DUR]) : NULL, *s = NULL;
    if (dur) {
        Py_INCREF(start); Py_INCREF(dur); Py_INCREF(args);
        s = new_slice((PyTypeObject *)PyTuple_GET_ITEM(spec, TASK_SPEC_SLICE_TYPE), rank,
                      PyTuple_GET_ITEM(spec, TASK_SPEC_LAYER), lane, name, start, dur, args,
                      kind == COMPUTE_KIND ? task_type : PyTuple_GET_ITEM(spec, TASK_SPEC_NOT_COMPUTE));
    }
    Py_XDECREF(args); Py_XDECREF(task_type); Py_XDECREF(name);
    return s;
}

/* An HCCL task's columns of the TASK query (ascend_db._COMM_PLACES), in its args' order (the keys'
 * order, ascend_db._COMM_KEYS, the bandwidth's last), then its name and plane */
enum { M_NOTIFY, M_STREAM, M_TASK, M_CONTEXT, M_LINK, M_TASK_TYPE, M_GROUP, M_SRC, M_DST, M_TRANSPORT,
       M_SIZE, M_DATA, M_LINK_TYPE, M_RDMA, M_MODEL, M_OP, M_NAME, M_PLANE, M_PLACES };
#define M_ARGS M_NAME      /* the args taken from the columns */
#define M_KEYS (M_ARGS + 1)  /* and the bandwidth */
#define EXACT (1LL << 53)  /* ints a double holds exactly: their quotient is the double's, correctly rounded */

/* The family (its place in a CommEnums) of the args that are HCCL enums, else -1 */
static int enum_family(int arg) {
    switch (arg) {
    case M_TRANSPORT: return COMM_ENUMS_TRANSPORT_TYPE;
    case M_DATA: return COMM_ENUMS_DATA_TYPE;
    case M_LINK_TYPE: return COMM_ENUMS_LINK_TYPE;
    case M_RDMA: return COMM_ENUMS_RDMA_TYPE;
    default: return -1;
    }
}

/* Whether C draws an HCCL task whose times, stream and strings are as expected: its enums and plane
 * INTEGER or NULL (the rules read another by Python's equality, 65534.0 N/A; the plane by format()) */
static int comm_ok(Rows *r, const int *m) {
    static const int columns[] = {M_TRANSPORT, M_DATA, M_LINK_TYPE, M_RDMA, M_PLANE};
    for (size_t i = 0; i < sizeof columns / sizeof *columns; i++) {
        int type = sqlite3_column_type(r->rows, m[columns[i]]);
        if (type != SQLITE_INTEGER && type != SQLITE_NULL) return 0;
    }
    return 1;
}

/* A new reference to an HCCL enum's name as ascend_db._Reader._enum gives it (``enums`` its family's
 * names by id): NULL with no error set for none (NULL, N/A, INVALID, a name that is NULL) */
static PyObject *enum_name(Rows *r, int column, PyObject *enums) {
    if (sqlite3_column_type(r->rows, column) == SQLITE_NULL) return NULL;
    long long id = sqlite3_column_int64(r->rows, column);
    if (id == 65534 || id == 65535) return NULL;
    PyObject *value = get(r, column);
    PyObject *name = value ? PyDict_GetItemWithError(enums, value) : NULL;
    if (name) return name == Py_None ? NULL : (Py_INCREF(name), name);
    return PyErr_Occurred() ? NULL : PyObject_Str(value);
}

/* args[key] = value (a new reference; NULL: none, unless an error is set): 0, or -1 on error */
static int put_arg(PyObject *args, PyObject *key, PyObject *value) {
    if (!value) return PyErr_Occurred() ? -1 : 0;
    int rc = PyDict_SetItem(args, key, value);
    Py_DECREF(value);
    return rc;
}

/* The bandwidth of an HCCL task (GB/s: bytes per ns), size / dur as Python divides ints (a new reference) */
static PyObject *bandwidth(Rows *r, int size_column, PyObject *dur) {
    long long size = sqlite3_column_int64(r->rows, size_column), ns = PyLong_AsLongLong(dur);
    if (ns == -1 && PyErr_Occurred()) return NULL;
    if (size >= -EXACT && size <= EXACT && ns <= EXACT) return PyFloat_FromDouble((double)size / (double)ns);
    PyObject *bytes = get(r, size_column);
    return bytes ? PyNumber_TrueDivide(bytes, dur) : NULL;
}

/* An HCCL task's args as ascend_db._Reader._comm_task makes them: every value but None, the notify
 * id unsigned, the enums named, the task type drawn; the bandwidth where the size is an int and the
 * task lasts. A dict, not JSON text as a compute task's: the bandwidth, a float, takes a repr and
 * orjson's spelling to write, and the Perfetto writer a parse to read (walk_args), which cost more
 * than the dict (callgrind, a real-shape rank: 18M instructions more, of 4,000M) */
static PyObject *comm_args(Rows *r, const int *m, PyObject *keys, PyObject *enums, PyObject *task_type,
                           PyObject *dur) {
    PyObject *args = PyDict_New();
    for (int i = 0; args && i < M_ARGS; i++) {
        int family = enum_family(i), column = m[i];
        long long notify = i == M_NOTIFY && sqlite3_column_type(r->rows, column) == SQLITE_INTEGER
                           ? sqlite3_column_int64(r->rows, column) : 0;
        PyObject *value;
        if (family >= 0) value = enum_name(r, column, PyTuple_GET_ITEM(enums, family));
        else if (i == M_TASK_TYPE) value = PyUnicode_GET_LENGTH(task_type) ? Py_NewRef(task_type) : NULL;
        else if (notify < 0)  /* SQLite holds signed 64-bit ints: -1 is 2**64 - 1 */
            value = PyLong_FromUnsignedLongLong((unsigned long long)notify);
        else if ((value = get(r, column)))
            value = value == Py_None ? NULL : Py_NewRef(value);
        if (put_arg(args, PyTuple_GET_ITEM(keys, i), value) < 0) Py_CLEAR(args);
    }
    if (args && sqlite3_column_type(r->rows, m[M_SIZE]) == SQLITE_INTEGER && PyObject_IsTrue(dur) &&
        put_arg(args, PyTuple_GET_ITEM(keys, M_ARGS), bandwidth(r, m[M_SIZE], dur)) < 0)
        Py_CLEAR(args);
    return args;
}

/* An as-expected HCCL task row of the TASK query as its Slice: what ascend_db._Reader._comm_task makes
 * of it. comm: (Layer.COMM_TASK, the args' keys, the columns' places, the enums' names by id (a dict a
 * family), the plane lanes made) */
static PyObject *comm_slice(Rows *r, const int *at, const int *m, PyObject *spec, PyObject *comm,
                            PyObject *rank) {
    static PyObject *hccl_task, *empty, *unknown;
    if (!hccl_task && !(hccl_task = PyUnicode_InternFromString("HCCL task"))) return NULL;
    if (!empty && !(empty = PyUnicode_InternFromString(""))) return NULL;
    if (!unknown && !(unknown = PyUnicode_InternFromString("?"))) return NULL;
    PyObject *plane = get(r, m[M_PLANE]), *planes = PyTuple_GET_ITEM(comm, COMM_SPEC_PLANES);
    PyObject *lane = plane ? lane_of(planes, plane, "Plane %S", plane == Py_None ? unknown : plane, NULL) : NULL;
    /* its strings resolved: str or None */
    PyObject *m_type = lane ? get(r, m[M_TASK_TYPE]) : NULL, *t_type = m_type ? get(r, at[TASK_PLACES_TYPE]) : NULL;
    PyObject *typed = t_type ? either(m_type, t_type) : NULL, *task_type = typed ? either(typed, empty) : NULL;
    PyObject *m_name = task_type ? get(r, m[M_NAME]) : NULL, *named = m_name ? either(m_name, task_type) : NULL;
    PyObject *name = named ? either(named, hccl_task) : NULL;
    PyObject *start = name ? get(r, at[TASK_PLACES_START]) : NULL, *dur = start ? get(r, at[TASK_PLACES_DUR]) : NULL, *s = NULL;
    PyObject *keys = PyTuple_GET_ITEM(comm, COMM_SPEC_KEYS), *enums = PyTuple_GET_ITEM(comm, COMM_SPEC_ENUMS);
    PyObject *args = dur ? comm_args(r, m, keys, enums, task_type, dur) : NULL;
    if (args) {
        Py_INCREF(start); Py_INCREF(dur);
        s = new_slice((PyTypeObject *)PyTuple_GET_ITEM(spec, TASK_SPEC_SLICE_TYPE), rank,
                      PyTuple_GET_ITEM(comm, COMM_SPEC_LAYER), lane, name, start, dur, args, task_type);
    }
    Py_XDECREF(typed); Py_XDECREF(task_type); Py_XDECREF(named); Py_XDECREF(name);
    return s;
}

/* The comm argument of rows.tasks, its places read into ``m``: 0, or -1 (an error set) */
static int comm_spec(PyObject *comm, int *m, int columns) {
    if (!PyTuple_Check(comm) || PyTuple_GET_SIZE(comm) != COMM_SPEC_FIELDS ||
        !PyTuple_Check(PyTuple_GET_ITEM(comm, COMM_SPEC_KEYS)) ||
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(comm, COMM_SPEC_KEYS)) != M_KEYS ||
        !PyTuple_Check(PyTuple_GET_ITEM(comm, COMM_SPEC_ENUMS)) ||
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(comm, COMM_SPEC_ENUMS)) != COMM_ENUMS_FIELDS ||
        !PyDict_CheckExact(PyTuple_GET_ITEM(comm, COMM_SPEC_PLANES)) ||
        places(PyTuple_GET_ITEM(comm, COMM_SPEC_PLACES), m, M_PLACES, columns) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "tasks: comm (layer, keys, places, enums, planes)");
        return -1;
    }
    for (int i = 0; i < COMM_ENUMS_FIELDS; i++)
        if (!PyDict_CheckExact(PyTuple_GET_ITEM(PyTuple_GET_ITEM(comm, COMM_SPEC_ENUMS), i))) {
            PyErr_SetString(PyExc_TypeError, "tasks: an HCCL enum's names are no dict");
            return -1;
        }
    return 0;
}

/* rows.tasks(out, spec, rank, lanes, all_tasks, comm) -> the number of rows left to the rules, or None
 * past the last row: the next batch of the TASK query's rows appended to ``out`` in order, those whose
 * times and stream (times_ok), strings and ``ok`` are as expected as their Slices (an HCCL task's plane
 * and enums INTEGER or NULL too: comm_ok), any other (a bad time, an id STRING_IDS lacks) as its row, a
 * tuple, for ascend_db._Reader._task_rules. spec: an ascend_db_specs.TaskSpec; comm: an ascend_db_specs.CommSpec,
 * what comm_slice reads. Summary (all_tasks off) draws only the compute tasks. */
static PyObject *rows_tasks(Rows *r, PyObject *const *argv, Py_ssize_t argc) {
    int at[TASK_PLACES_FIELDS], m[M_PLACES];
    PyObject *spec = argc == 6 ? argv[1] : NULL;
    if (argc != 6 || !PyList_CheckExact(argv[0]) || !PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != TASK_SPEC_FIELDS ||
        !PyType_Check(PyTuple_GET_ITEM(spec, TASK_SPEC_SLICE_TYPE)) || !PyTuple_Check(PyTuple_GET_ITEM(spec, TASK_SPEC_KEYS)) ||
        !PyDict_CheckExact(argv[3]) ||
        places(PyTuple_GET_ITEM(spec, TASK_SPEC_PLACES), at, TASK_PLACES_FIELDS, 1000) < 0 ||
        at[TASK_PLACES_ARGS_END] - at[TASK_PLACES_ARGS_AT] != PyTuple_GET_SIZE(PyTuple_GET_ITEM(spec, TASK_SPEC_KEYS)) ||
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(spec, TASK_SPEC_KEYS)) > MAX_ARGS || comm_spec(argv[5], m, 1000) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "tasks(out, spec, rank, lanes, all_tasks, comm)");
        return NULL;
    }
    for (int p = 0; r->rows && p < TASK_PLACES_FIELDS + M_PLACES; p++)
        if ((p < TASK_PLACES_FIELDS ? at[p] : m[p - TASK_PLACES_FIELDS]) >= r->columns) {
            PyErr_SetString(PyExc_ValueError, "tasks: a place past the query's columns");
            return NULL;
        }
    if (!r->rows) Py_RETURN_NONE;  /* past the last row */
    PyObject *out = argv[0], *rank = argv[2], *lanes = argv[3];
    if (names_of(r, PyTuple_GET_ITEM(spec, TASK_SPEC_KEYS)) < 0) return NULL;
    int all_tasks = PyObject_IsTrue(argv[4]), read = 0;
    if (all_tasks < 0) return NULL;
    Py_ssize_t rare = 0;
    for (; read < r->batch; read++) {
        int more = next_row(r);
        if (more <= 0) {
            if (more < 0) return NULL;
            break;
        }
        long long kind = sqlite3_column_int64(r->rows, at[TASK_PLACES_KIND]);
        if (kind != COMPUTE_KIND && !all_tasks) continue;  /* summary draws no other */
        int unresolved = resolve(r);
        PyObject *c_type = unresolved < 0 ? NULL : get(r, at[TASK_PLACES_C_TYPE]);
        PyObject *t_type = c_type ? get(r, at[TASK_PLACES_TYPE]) : NULL;
        if (!t_type) return NULL;
        /* COALESCE(NULLIF(c.taskType, ''), NULLIF(t.taskType, '')) */
        PyObject *chosen = c_type != Py_None && !is_empty(c_type) ? c_type
                           : t_type != Py_None && !is_empty(t_type) ? t_type : Py_None;
        Py_INCREF(chosen);
        Py_XSETREF(r->values[at[TASK_PLACES_TASK_TYPE]], chosen);
        int fast = !unresolved && sqlite3_column_int(r->rows, at[TASK_PLACES_OK]) &&
                   times_ok(r, at[TASK_PLACES_START_NS], at[TASK_PLACES_END_NS], at[TASK_PLACES_STREAM]) &&
                   (kind != COMM_KIND || comm_ok(r, m));
        PyObject *made = !fast ? row_tuple(r)
                         : kind == COMM_KIND ? comm_slice(r, at, m, spec, argv[5], rank)
                         : task_slice(r, at, kind, spec, rank, lanes);
        if (append_made(out, made) < 0) return NULL;
        rare += !fast;
    }
    if (!read) Py_RETURN_NONE;
    return PyLong_FromSsize_t(rare);
}

/* A host query's columns (ascend_db._Reader.host): ok, links, startNs, endNs, name, globalTid, then
 * the args (connectionId first) */
enum { H_OK, H_LINKS, H_START, H_END, H_NAME, H_TID, H_ARGS };

/* An as-expected row of a host query as its Slice: what ascend_db._Reader._host_slice makes of it */
static PyObject *host_slice(Rows *r, PyObject *const *argv) {
    static PyObject *type_key, *empty;
    if (!type_key && !(type_key = PyUnicode_InternFromString("type"))) return NULL;
    if (!empty && !(empty = PyUnicode_InternFromString(""))) return NULL;
    PyObject *spec = argv[1], *rank = argv[2], *lanes = argv[3], *prefix = argv[4], *api = argv[5],
             *links = argv[6];
    PyObject *keys = PyTuple_GET_ITEM(spec, HOST_SPEC_KEYS);
    Args a;
    PyObject *s = NULL;
    int ok = args_of(r, H_ARGS, keys, PyTuple_GET_SIZE(keys), 1, &a) == 0;
    for (Py_ssize_t i = 0; ok && api != Py_None && i < a.n; i++) {  /* args["type"] = api.get(kind, kind) */
        int is_type = PyUnicode_Compare(a.names[i], type_key);
        PyObject *kind = is_type == 0 && !a.values[i] ? (a.values[i] = get(r, a.columns[i])) : a.values[i];
        PyObject *named = is_type == 0 && kind ? PyDict_GetItemWithError(api, kind) : NULL;
        if (named) a.values[i] = named;  /* the dict holds it, and no Python code runs while it is used */
        ok = !PyErr_Occurred();
    }
    PyObject *args = ok ? args_made(r, &a) : NULL;
    PyObject *link = args ? get(r, H_LINKS) : NULL;
    if (link && link != Py_None && PyDict_SetItem(links, get(r, H_ARGS), link) < 0) Py_CLEAR(args);
    PyObject *tid = args ? get(r, H_TID) : NULL;
    unsigned long long thread = tid ? PyLong_AsUnsignedLongLongMask(tid) & 0xFFFFFFFFULL : 0;
    PyObject *number = tid && !PyErr_Occurred() ? PyLong_FromUnsignedLongLong(thread) : NULL;
    PyObject *lane = number ? lane_of(lanes, tid, "%U (thread %S)", prefix, number) : NULL;
    PyObject *named = lane ? get(r, H_NAME) : NULL, *name = named ? either(named, prefix) : NULL;
    Py_XDECREF(number);
    long long start, end;
    if (name && column_time(r->rows, H_START, &start) && column_time(r->rows, H_END, &end)) {
        /* the times as times_ok read them: integers whose sum and difference fit */
        s = new_slice((PyTypeObject *)PyTuple_GET_ITEM(spec, HOST_SPEC_SLICE_TYPE), rank,
                      PyTuple_GET_ITEM(spec, HOST_SPEC_LAYER), lane, name, PyLong_FromLongLong(start + r->offset),
                      PyLong_FromLongLong(end - start), args, empty);
        args = NULL;
    }
    Py_XDECREF(args); Py_XDECREF(name);
    return s;
}

/* rows.host(out, spec, rank, lanes, prefix, api, links) -> the number of rows left to the rules, or
 * None past the last row: the next batch of a host table's rows appended to ``out`` in order, those
 * whose times and thread (times_ok), strings and ``ok`` are as expected as their Slices (their
 * PyTorch links noted in ``links``), any other as its row, a tuple, for ascend_db._Reader._host_slice.
 * spec: an ascend_db_specs.HostSpec; api: CANN's API types by id, or None. */
static PyObject *rows_host(Rows *r, PyObject *const *argv, Py_ssize_t argc) {
    PyObject *spec = argc == 7 ? argv[1] : NULL;
    if (argc != 7 || !PyList_CheckExact(argv[0]) || !PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != HOST_SPEC_FIELDS ||
        !PyType_Check(PyTuple_GET_ITEM(spec, HOST_SPEC_SLICE_TYPE)) || !PyTuple_Check(PyTuple_GET_ITEM(spec, HOST_SPEC_KEYS)) ||
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(spec, HOST_SPEC_KEYS)) > MAX_ARGS ||
        !PyDict_CheckExact(argv[3]) || !PyUnicode_Check(argv[4]) ||
        (argv[5] != Py_None && !PyDict_CheckExact(argv[5])) ||
        !PyDict_CheckExact(argv[6])) {
        PyErr_SetString(PyExc_TypeError, "host(out, spec, rank, lanes, prefix, api, links)");
        return NULL;
    }
    if (!r->rows) Py_RETURN_NONE;  /* past the last row */
    if (r->columns < H_ARGS + PyTuple_GET_SIZE(PyTuple_GET_ITEM(spec, HOST_SPEC_KEYS))) {
        PyErr_SetString(PyExc_ValueError, "host: more args than the query has columns");
        return NULL;
    }
    if (names_of(r, PyTuple_GET_ITEM(spec, HOST_SPEC_KEYS)) < 0) return NULL;
    Py_ssize_t rare = 0;
    int read = 0;
    for (; read < r->batch; read++) {
        int more = next_row(r);
        if (more <= 0) {
            if (more < 0) return NULL;
            break;
        }
        int unresolved = resolve(r);
        if (unresolved < 0) return NULL;
        int fast = !unresolved && sqlite3_column_int(r->rows, H_OK) && times_ok(r, H_START, H_END, H_TID);
        PyObject *made = fast ? host_slice(r, argv) : row_tuple(r);
        if (append_made(argv[0], made) < 0) return NULL;
        rare += !fast;
    }
    if (!read) Py_RETURN_NONE;
    return PyLong_FromSsize_t(rare);
}

static PyMethodDef rows_methods[] = {
    {"tasks", (PyCFunction)(void (*)(void))rows_tasks, METH_FASTCALL,
     "tasks(out, spec, rank, lanes, all_tasks, comm) -> rows left to the rules (None: no more rows)"},
    {"host", (PyCFunction)(void (*)(void))rows_host, METH_FASTCALL,
     "host(out, spec, rank, lanes, prefix, api, links) -> rows left to the rules (None: no more rows)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RowsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "converters.readers._db_core.Rows",
    .tp_basicsize = sizeof(Rows),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Rows(uri, sql, offset, strings, string_ids, batch): a query's rows read into slices in C",
    .tp_new = rows_new,
    .tp_dealloc = (destructor)rows_dealloc,
    .tp_methods = rows_methods,
};

/* -- counter and memory rows into samples --------------------------------------------------------- */

/* The row's key: its first column (keys == 1), else a tuple of its first ``keys`` (new reference); NULL,
 * no error set, where one is no str, int or None: 1 == 1.0 == True would find another's lanes */
static PyObject *key_of(PyObject *row, Py_ssize_t keys) {
    for (Py_ssize_t i = 0; i < keys; i++) {
        PyObject *part = PyTuple_GET_ITEM(row, i);
        if (!PyUnicode_CheckExact(part) && !PyLong_CheckExact(part) && part != Py_None) return NULL;
    }
    return keys == 1 ? Py_NewRef(PyTuple_GET_ITEM(row, 0)) : PyTuple_GetSlice(row, 0, keys);
}

/* A sample's value as float(value) makes it, for an int or a float (new reference); NULL, no error set,
 * for any other value or an int past a double: the rules' */
static PyObject *plain_float(PyObject *value) {
    if (PyFloat_CheckExact(value)) return Py_NewRef(value);
    if (!PyLong_CheckExact(value)) return NULL;
    double d = PyLong_AsDouble(value);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return NULL;
    }
    return PyFloat_FromDouble(d);
}

/* The row's time shifted by ``offset`` as an int within the model's limit (new reference); NULL, no
 * error set, for any other value: the rules' */
static PyObject *plain_time(PyObject *ts, long long offset) {
    int overflow = 0;
    long long t = PyLong_CheckExact(ts) ? PyLong_AsLongLongAndOverflow(ts, &overflow) : 0, shifted;
    if (!PyLong_CheckExact(ts) || overflow || !shifted_ok(t, offset, &shifted)) return NULL;
    return PyLong_FromLongLong(shifted);
}

#define MAX_VALUES 16  /* a row's value columns (the tables have 1 to 3) */

/* The samples of one row whose key ``lanes`` holds, time and values plain: 1 made, 0 left to the rules
 * (nothing appended), -1 on error */
static int row_samples(PyObject *row, Py_ssize_t keys, PyObject *names, PyObject *rank, long long offset,
                       PyTypeObject *sample_type, PyObject *out) {
    Py_ssize_t n = PyTuple_GET_SIZE(row) - keys - 1;
    if (!PyTuple_Check(names) || PyTuple_GET_SIZE(names) != n || n > MAX_VALUES) return 0;
    PyObject *values[MAX_VALUES] = {NULL}, *ts = plain_time(PyTuple_GET_ITEM(row, keys), offset);
    int made = ts != NULL;
    for (Py_ssize_t j = 0; made && j < n; j++)
        made = (values[j] = plain_float(PyTuple_GET_ITEM(row, keys + 1 + j))) != NULL;
    if (PyErr_Occurred()) made = -1;
    for (Py_ssize_t j = 0; made == 1 && j < n; j++) {
        PyObject *name = PyTuple_GET_ITEM(names, j), *sample;
        if (name == Py_None) continue;
        if (!(sample = sample_type->tp_alloc(sample_type, SAMPLE_FIELDS))) {
            made = -1;
            break;
        }
        PyTuple_SET_ITEM(sample, SAMPLE_RANK, Py_NewRef(rank));
        PyTuple_SET_ITEM(sample, SAMPLE_LANE, Py_NewRef(name));
        PyTuple_SET_ITEM(sample, SAMPLE_START_NS, Py_NewRef(ts));
        PyTuple_SET_ITEM(sample, SAMPLE_VALUE, Py_NewRef(values[j]));
        if (append_made(out, sample) < 0) made = -1;
    }
    Py_XDECREF(ts);
    for (Py_ssize_t j = 0; j < n; j++) Py_XDECREF(values[j]);
    return made;
}

/* samples(rows, keys, lanes, rank, offset, Sample, rules, out): each row (its ``keys`` first columns,
 * the time, then the values) as ascend_db's counter and memory rules make it, appended to ``out``: a
 * Sample for each value whose lane ``lanes[key]`` names (None: no sample), at the time + offset, of
 * float(value); a row whose key ``lanes`` lacks, whose time is no int within the model's limit or a value
 * no int or float goes to ``rules(row)``, whose samples are appended in its place. A real rank holds
 * ~80,000 such samples, a Python loop and a NamedTuple each (BENCHMARKS.md, issue 28, session 17). */
static PyObject *samples(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    (void)module;
    Py_ssize_t keys = argc == 8 ? PyLong_AsSsize_t(argv[1]) : -1;
    long long offset = argc == 8 ? PyLong_AsLongLong(argv[4]) : 0;
    if (PyErr_Occurred()) return NULL;
    if (argc != 8 || !PyList_Check(argv[0]) || keys < 0 || !PyDict_Check(argv[2]) || !PyType_Check(argv[5]) ||
        !PyList_Check(argv[7])) {
        PyErr_SetString(PyExc_TypeError, "samples(rows, keys, lanes, rank, offset, Sample, rules, out)");
        return NULL;
    }
    PyObject *rows = argv[0], *lanes = argv[2], *rules = argv[6], *out = argv[7];
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rows); i++) {
        PyObject *row = PyList_GET_ITEM(rows, i), *key, *names;
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) <= keys) {
            PyErr_SetString(PyExc_TypeError, "samples: a row of its keys, its time and its values");
            return NULL;
        }
        key = key_of(row, keys);
        if (!key && PyErr_Occurred()) return NULL;
        names = key ? PyDict_GetItemWithError(lanes, key) : NULL;
        Py_XDECREF(key);
        int made = names ? row_samples(row, keys, names, argv[3], offset, (PyTypeObject *)argv[5], out)
                         : PyErr_Occurred() ? -1 : 0;
        if (made < 0) return NULL;
        if (!made) {
            PyObject *ruled = PyObject_CallOneArg(rules, row);
            int extended = ruled ? PyList_SetSlice(out, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, ruled) : -1;
            Py_XDECREF(ruled);
            if (extended < 0) return NULL;
        }
    }
    Py_RETURN_NONE;
}

PyMethodDef ROWS_METHODS[] = {
    {"samples", (PyCFunction)(void (*)(void))samples, METH_FASTCALL,
     "samples(rows, keys, lanes, rank, offset, Sample, rules, out): counter and memory rows as Samples, "
     "the rows C cannot make given to rules in their place"},
    {NULL, NULL, 0, NULL},
};

int rows_ready(PyObject *module) {
    PyObject *sqlite = PyImport_ImportModule("sqlite3");
    if (!sqlite) return -1;
    database_error = PyObject_GetAttrString(sqlite, "DatabaseError");
    operational_error = PyObject_GetAttrString(sqlite, "OperationalError");
    Py_DECREF(sqlite);
    if (!database_error || !operational_error || PyType_Ready(&RowsType) < 0) return -1;
    return PyModule_AddObjectRef(module, "Rows", (PyObject *)&RowsType);
}
