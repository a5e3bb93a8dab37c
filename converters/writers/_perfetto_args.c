/* A slice's args as DebugAnnotations (pf_put_args), for the Perfetto writer's per-event loop
 * (_perfetto_core.c; what the two share: _perfetto_core.h): a dict's, each item through
 * pf_put_annotation, or raw JSON's, encoded once per sequence and text; raw JSON read here with no
 * dict made (``walk_args``) where it is an object of scalars and of nested values of no floats,
 * else decoded by Python's rule (``decoded_args``) and written as a dict's.
 */
#include "_perfetto_core.h"  /* Python.h, the buffer, State */

static int put_dict(State *st, Buf *b, PyObject *args) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(args, &pos, &key, &value)) {
        /* a callback may run Python code, but never on this dict: hold references anyway */
        Py_INCREF(key); Py_INCREF(value);
        int rc = pf_put_annotation(st, b, key, value);
        Py_DECREF(key); Py_DECREF(value);
        if (rc < 0) return -1;
    }
    return 0;
}

/* ``raw`` decoded by ``decoded_args`` (the rule), its annotations written as a dict's. */
static int put_decoded(State *st, Buf *b, PyObject *raw) {
    PyObject *decoded = PyObject_CallOneArg(st->decode, raw);
    if (!decoded) return -1;
    if (!PyDict_CheckExact(decoded)) {
        PyObject *wrapped = Py_BuildValue("{sO}", "args", decoded);
        Py_DECREF(decoded);
        if (!(decoded = wrapped)) return -1;
    }
    int rc = put_dict(st, b, decoded);
    Py_DECREF(decoded);
    return rc;
}

/* Raw JSON args read without decoding them into a dict (``walk_args``): an object of strings,
 * numbers, booleans and nulls, and of arrays and objects of these but floats (Kineto's ``Input
 * Dims``, ``Input type``), as most slices' args are. Each member is first checked (the whole
 * object, before anything is written), then written as the key and value ``decoded_args`` would
 * have made, through ``pf_put_annotation`` as a dict's are, a nested value as its compact text
 * (``compact_value``: what orjson.dumps writes of its decoded value); anything else (floats in
 * nested values, \u escapes, repeated or escaped keys, ints past 18 digits, text that is no valid
 * JSON) is left to ``decoded_args``, the rule, which the tests compare this against. A string or
 * nested member's annotation, constant on a sequence, is remembered by its text, in C
 * (``MemberCache``): written again with no Python object made; a number's or bool's is encoded
 * each time, its name's reference remembered by its key (``put_number``). */
#define MAX_MEMBERS 64
#define KEY_CACHE 512                 /* a power of two: keys' str objects, shared by every call */
#define MAX_CACHED_KEY 64

/* Two words a step in two lanes, their multiplies overlapping: an args text is ~120 bytes. The
 * hash only places texts in the caches, never decides what is written. */
static unsigned long long hash_text(const char *p, Py_ssize_t n) {
    unsigned long long h = 0, g = 0x243F6A8885A308D3ULL;
    for (; n >= 16; p += 16, n -= 16) {
        unsigned long long w, v;
        memcpy(&w, p, 8);
        memcpy(&v, p + 8, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
        g = (g ^ v) * 0xC2B2AE3D27D4EB4FULL;
        h ^= h >> 29;
        g ^= g >> 31;
    }
    h ^= g;
    for (; n >= 8; p += 8, n -= 8) {
        unsigned long long w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
        h ^= h >> 29;
    }
    unsigned long long w = 0;
    memcpy(&w, p, n);
    h = (h ^ w ^ ((unsigned long long)n << 56)) * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 32);
}

typedef struct { unsigned long long hash; Py_ssize_t len; char text[MAX_CACHED_KEY]; PyObject *key; } CachedKey;
static CachedKey key_cache[KEY_CACHE];

/* A key's str (new reference), from the cache where it is short; NULL with no error: not UTF-8. */
static PyObject *key_of(const char *text, Py_ssize_t len) {
    unsigned long long hash = hash_text(text, len);
    CachedKey *slot = NULL;
    for (int probe = 0; len <= MAX_CACHED_KEY && probe < 8; probe++) {
        slot = &key_cache[(hash + probe) & (KEY_CACHE - 1)];
        if (!slot->key) break;
        if (slot->hash == hash && slot->len == len && memcmp(slot->text, text, len) == 0) {
            Py_INCREF(slot->key);
            return slot->key;
        }
        slot = NULL;
    }
    PyObject *key = PyUnicode_DecodeUTF8(text, len, NULL);
    if (!key) { PyErr_Clear(); return NULL; }
    if (slot) {  /* an empty slot of the key's probe sequence */
        slot->hash = hash; slot->len = len; memcpy(slot->text, text, len);
        slot->key = key;
        Py_INCREF(key);
    }
    return key;
}

/* One sequence's members written before: their text -> annotation bytes, in ``arena``. 20 bytes
 * (the arena kept under 4 GiB), so that more slots share a cache line: most lookups miss it. */
typedef struct { uint32_t hash, text_len, text_at, bytes_at, bytes_len; } Member;
typedef struct MemberCache { Member *slots; Py_ssize_t used, cap, mask; Buf arena; } MemberCache;
/* A sequence's: its raw args' members, and whole raw args (key: the text, value: none) */
typedef struct { MemberCache members, raws; } RawCaches;

static void raw_caches_free(PyObject *capsule) {
    RawCaches *caches = PyCapsule_GetPointer(capsule, "raw_caches");
    if (!caches) return;
    PyMem_Free(caches->members.slots); PyMem_Free(caches->members.arena.data);
    PyMem_Free(caches->raws.slots); PyMem_Free(caches->raws.arena.data);
    PyMem_Free(caches);
}

static int cache_init(MemberCache *cache, Py_ssize_t cap) {
    cache->cap = cap;
    cache->mask = 2 * cap - 1;  /* at most half full */
    return (cache->slots = PyMem_Calloc(2 * cap, sizeof(Member))) ? 0 : -1;
}

/* The sequence's caches (``seq.raw_caches``, made on first use) into ``st``. */
static int raw_caches_of(State *st) {
    PyObject *held = PyObject_GetAttrString(st->seq, "raw_caches");
    if (!held) return -1;
    if (held == Py_None) {
        Py_DECREF(held);
        RawCaches *caches = PyMem_Calloc(1, sizeof(RawCaches));
        if (!caches) { PyErr_NoMemory(); return -1; }
        if (!(held = PyCapsule_New(caches, "raw_caches", raw_caches_free))) { PyMem_Free(caches); return -1; }
        if (cache_init(&caches->members, MAX_INTERNED) < 0 || cache_init(&caches->raws, MAX_RAW_CACHED) < 0) {
            Py_DECREF(held);
            PyErr_NoMemory();
            return -1;
        }
        if (PyObject_SetAttrString(st->seq, "raw_caches", held) < 0) { Py_DECREF(held); return -1; }
    }
    RawCaches *caches = PyCapsule_GetPointer(held, "raw_caches");
    Py_DECREF(held);  /* the sequence holds it */
    if (!caches) return -1;
    st->members = &caches->members;
    st->raws = &caches->raws;
    return 0;
}

/* The text's slot: its own, or the empty one where it goes. */
static Member *member_slot(MemberCache *cache, unsigned long long hash, const char *text, Py_ssize_t text_len) {
    for (Py_ssize_t i = hash & cache->mask;; i = (i + 1) & cache->mask) {
        Member *m = &cache->slots[i];
        if (!m->bytes_len) return m;  /* an annotation is never empty */
        if (m->hash == (uint32_t)hash && m->text_len == text_len &&
            memcmp(cache->arena.data + m->text_at, text, text_len) == 0)
            return m;
    }
}

static int member_remember(MemberCache *cache, Member *slot, unsigned long long hash, const char *text,
                           Py_ssize_t text_len, const char *bytes, Py_ssize_t bytes_len) {
    Buf *arena = &cache->arena;
    if (cache->used >= cache->cap || bytes_len == 0 || arena->len + text_len + bytes_len > UINT32_MAX) return 0;
    Member m = {(uint32_t)hash, (uint32_t)text_len, (uint32_t)arena->len, (uint32_t)(arena->len + text_len),
                (uint32_t)bytes_len};
    if (buf_put(arena, text, text_len) < 0 || buf_put(arena, bytes, bytes_len) < 0) return -1;
    *slot = m;
    cache->used++;
    return 0;
}

enum { J_STRING, J_INT, J_FLOAT, J_TRUE, J_FALSE, J_NULL, J_NESTED };

typedef struct {  /* one member of the object, checked */
    const char *key, *value;   /* their text, without a string's quotes */
    Py_ssize_t key_len, value_len;
    int kind, escaped;
    long long integer;
    double number;
    Py_ssize_t compact_at, compact_len;  /* J_NESTED: its compact text, in the walk's ``compact`` */
} Field;

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static const char *skip_space(const char *p, const char *end) {
    while (p < end && is_space(*p)) p++;
    return p;
}

/* Text with bytes past ASCII: 1 where it is UTF-8 */
static int is_utf8(const char *text, Py_ssize_t len) {
    PyObject *made = PyUnicode_DecodeUTF8(text, len, NULL);
    if (!made) { PyErr_Clear(); return 0; }
    Py_DECREF(made);
    return 1;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* How many of the 8 bytes of a string at ``p`` need no look: before the first quote, backslash,
 * control char or byte past ASCII (a zero byte of ``w ^ c`` sets its high bit in ``(x - ONES) & ~x``;
 * a byte below 0x20 in ``w - 0x20..``, the borrow only ever flagging bytes past one already flagged,
 * so the lowest flag is a true one); 8: none does. Where bytes are not little-endian, a block
 * with any flag counts 0 (looked at byte by byte). */
static int plain_run8(const char *p) {
    unsigned long long w, quote, slash, flags;
    memcpy(&w, p, 8);
    quote = w ^ (ONES * '"');
    slash = w ^ (ONES * '\\');
    flags = (((quote - ONES) & ~quote) | ((slash - ONES) & ~slash) | (w - ONES * 0x20) | w) & HIGHS;
    if (!flags) return 8;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return __builtin_ctzll(flags) >> 3;
#else
    return 0;
#endif
}

/* A JSON string from after its opening quote to past its closing one: 1, or 0 (left to the rule).
 * Its plain runs are skipped 8 bytes at a time, up to the byte that needs a look (an escape every
 * few bytes, ``Input Dims``' \r\n, is reached in a step, not byte by byte); only text past ASCII is
 * decoded, to check it. */
static int check_string(const char **at, const char *end, const char **text, Py_ssize_t *len, int *escaped) {
    const char *p = *at;
    int ascii = 1;
    *escaped = 0;
    for (;;) {
        while (end - p >= 8) {
            int run = plain_run8(p);
            p += run;
            if (run < 8) break;
        }
        if (p >= end) return 0;
        unsigned char c = (unsigned char)*p;
        if (c == '"') break;
        if (c < 0x20) return 0;
        if (c == '\\') {
            if (p + 1 >= end || !strchr("\"\\/bfnrt", p[1]) || !p[1]) return 0;
            *escaped = 1;
            p += 2;
        } else {
            ascii &= c < 0x80;
            p++;
        }
    }
    *text = *at;
    *len = p - *at;
    *at = p + 1;
    return ascii || is_utf8(*text, *len);
}

static const char *digits(const char *p, const char *end) {
    while (p < end && *p >= '0' && *p <= '9') p++;
    return p;
}

static int check_value(const char **at, const char *end, Field *f, Buf *compact);

/* A JSON number: an int of up to 18 digits, or a float (read as float() reads it: past a double,
 * ±inf): 1, or 0 (left to the rule). */
static int check_number(const char **at, const char *end, Field *f) {
    const char *p = *at, *start = p;
    if (p < end && *p == '-') p++;
    const char *first = p;
    if (p < end && *p == '0') p++;
    else if (p < end && *p >= '1' && *p <= '9') p = digits(p, end);
    else return 0;
    f->kind = J_INT;
    if (p < end && *p == '.') {
        const char *frac = ++p;
        if ((p = digits(p, end)) == frac) return 0;
        f->kind = J_FLOAT;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const char *exp = p;
        if ((p = digits(p, end)) == exp) return 0;
        f->kind = J_FLOAT;
    }
    *at = p;
    f->value = start;
    f->value_len = p - start;
    if (f->kind == J_INT) {
        if (p - first > 18) return 0;
        long long v = 0;
        for (const char *q = first; q < p; q++) v = v * 10 + (*q - '0');
        f->integer = *start == '-' ? -v : v;
        return 1;
    }
    char text[64];
    if (p - start >= (Py_ssize_t)sizeof(text)) return 0;
    memcpy(text, start, p - start);
    text[p - start] = '\0';
    char *stop;
    f->number = PyOS_string_to_double(text, &stop, NULL);
    if (f->number == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return stop == text + (p - start);
}

/* A checked string (``text``, ``len`` bytes, no \u escape) as orjson.dumps writes it once decoded:
 * the same text, but for ``\/``, which it writes as ``/``. */
static int compact_string(Buf *out, const char *text, Py_ssize_t len, int escaped) {
    if (buf_reserve(out, len + 2) < 0) return -1;
    char *w = out->data + out->len;
    *w++ = '"';
    if (!escaped) {
        memcpy(w, text, len);
        w += len;
    } else {
        for (const char *q = text, *end = text + len; q < end; q++) {
            if (*q == '\\' && q[1] == '/') continue;  /* the "/" after it is copied next */
            if (*q == '\\') *w++ = *q++;              /* any other escape kept whole */
            *w++ = *q;
        }
    }
    *w++ = '"';
    out->len = w - out->data;
    return 0;
}

#define MAX_NESTED_KEYS 64

/* A nested JSON value (array or object) at ``*at``, checked and its decoded value written into
 * ``out`` as orjson.dumps writes it: compact, for arrays and objects of strings (no \u escapes),
 * ints of up to 18 digits, booleans and nulls; 1, or 0 (left to the rule: floats, whose digits
 * orjson writes by its own rules, repeated keys, deeper than MAX_DEPTH, no JSON). */
static int compact_value(const char **at, const char *end, Buf *out, int depth) {
    const char *p = *at;
    if (p >= end) return 0;
    char open = *p;
    if (open == '"') {
        const char *text;
        Py_ssize_t len;
        int escaped;
        *at = p + 1;
        if (!check_string(at, end, &text, &len, &escaped)) return 0;
        return compact_string(out, text, len, escaped) < 0 ? 0 : 1;
    }
    if (open != '[' && open != '{') {
        Field f;
        if (!check_value(at, end, &f, NULL) || f.kind == J_FLOAT) return 0;
        if (f.kind == J_INT && f.integer == 0) return buf_put(out, "0", 1) < 0 ? 0 : 1;  /* -0 too */
        return buf_put(out, f.value, f.value_len) < 0 ? 0 : 1;
    }
    if (depth >= MAX_DEPTH) return 0;
    char close = open == '[' ? ']' : '}';
    Py_ssize_t keys_at[MAX_NESTED_KEYS], keys_len[MAX_NESTED_KEYS];
    int keys = 0;
    if (buf_put(out, &open, 1) < 0) return 0;
    p = skip_space(p + 1, end);
    if (p < end && *p == close) {
        *at = p + 1;
        return buf_put(out, &close, 1) < 0 ? 0 : 1;
    }
    for (;;) {
        if (open == '{') {  /* a key, its compact text compared with the object's others' */
            Py_ssize_t key_at = out->len;
            if (keys == MAX_NESTED_KEYS || p >= end || *p != '"' || !compact_value(&p, end, out, depth + 1))
                return 0;
            Py_ssize_t key_len = out->len - key_at;
            for (int i = 0; i < keys; i++)
                if (keys_len[i] == key_len && memcmp(out->data + keys_at[i], out->data + key_at, key_len) == 0)
                    return 0;  /* a repeated key: the dict keeps the first's place, the last's value */
            keys_at[keys] = key_at;
            keys_len[keys++] = key_len;
            p = skip_space(p, end);
            if (p >= end || *p != ':' || buf_put(out, ":", 1) < 0) return 0;
            p = skip_space(p + 1, end);
        }
        if (!compact_value(&p, end, out, depth + 1)) return 0;
        p = skip_space(p, end);
        if (p < end && *p == ',') {
            if (buf_put(out, ",", 1) < 0) return 0;
            p = skip_space(p + 1, end);
            continue;
        }
        if (p < end && *p == close) {
            *at = p + 1;
            return buf_put(out, &close, 1) < 0 ? 0 : 1;
        }
        return 0;
    }
}

/* A member's value, checked; a nested one (with ``compact``: at the top) also written compact. */
static int check_value(const char **at, const char *end, Field *f, Buf *compact) {
    const char *p = *at;
    if (p >= end) return 0;
    if (compact && (*p == '[' || *p == '{')) {
        f->kind = J_NESTED;
        f->value = p;
        f->compact_at = compact->len;
        if (!compact_value(at, end, compact, 0)) return 0;
        f->value_len = *at - p;
        f->compact_len = compact->len - f->compact_at;
        return 1;
    }
    static const struct { const char *word; int kind; } words[] = {{"true", J_TRUE}, {"false", J_FALSE}, {"null", J_NULL}};
    for (int i = 0; i < 3; i++) {
        Py_ssize_t n = (Py_ssize_t)strlen(words[i].word);
        if (*p == words[i].word[0]) {
            if (end - p < n || memcmp(p, words[i].word, n) != 0) return 0;
            f->kind = words[i].kind;
            f->value = p;
            f->value_len = n;
            *at = p + n;
            return 1;
        }
    }
    if (*p != '"') return check_number(at, end, f);
    *at = p + 1;
    f->kind = J_STRING;
    return check_string(at, end, &f->value, &f->value_len, &f->escaped);
}

/* Keys of one length seldom share their last byte ("Model Id", "Batch Id"): memcmp only where they do */
static int same_key(const Field *a, const Field *b) {
    Py_ssize_t n = a->key_len;
    return n == b->key_len && (n == 0 || (a->key[n - 1] == b->key[n - 1] && memcmp(a->key, b->key, n) == 0));
}

/* The members of a JSON object, checked (nested ones also written into ``compact``): their count,
 * or -1 (left to the rule; an error set where memory ran out). */
static int check_object(const char *p, const char *end, Field *fields, Buf *compact) {
    int n = 0;
    p = skip_space(p, end);
    if (p >= end || *p++ != '{') return -1;
    p = skip_space(p, end);
    if (p < end && *p == '}') return skip_space(p + 1, end) == end ? 0 : -1;
    for (;;) {
        Field *f = &fields[n];
        int key_escaped;
        if (n == MAX_MEMBERS || p >= end || *p++ != '"' || !check_string(&p, end, &f->key, &f->key_len, &key_escaped) ||
            key_escaped)
            return -1;
        for (int i = 0; i < n; i++)  /* a repeated key: the dict keeps the first's place, the last's value */
            if (same_key(&fields[i], f)) return -1;
        p = skip_space(p, end);
        if (p >= end || *p++ != ':') return -1;
        p = skip_space(p, end);
        if (!check_value(&p, end, f, compact)) return -1;
        n++;
        p = skip_space(p, end);
        if (p < end && *p == ',') { p = skip_space(p + 1, end); continue; }
        if (p < end && *p == '}') return skip_space(p + 1, end) == end ? n : -1;
        return -1;
    }
}

/* A checked string's str: unescaped (\u excepted, which the check refused). New reference. */
static PyObject *string_of(const Field *f, Buf *scratch) {
    if (!f->escaped) return PyUnicode_DecodeUTF8(f->value, f->value_len, NULL);
    scratch->len = 0;
    if (buf_reserve(scratch, f->value_len) < 0) return NULL;
    for (const char *q = f->value; q < f->value + f->value_len; q++) {
        char c = *q;
        if (c == '\\') {
            switch (*++q) {
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            default: c = *q;  /* " \ / */
            }
        }
        scratch->data[scratch->len++] = c;
    }
    return PyUnicode_DecodeUTF8(scratch->data, scratch->len, NULL);
}

static PyObject *value_of(const Field *f, Buf *scratch) {
    switch (f->kind) {
    case J_STRING: return string_of(f, scratch);
    case J_INT: return PyLong_FromLongLong(f->integer);
    case J_FLOAT: return PyFloat_FromDouble(f->number);
    case J_TRUE: Py_RETURN_TRUE;
    case J_FALSE: Py_RETURN_FALSE;
    default: Py_RETURN_NONE;
    }
}

/* A number's or bool's annotation, written as pf_put_annotation writes one, with its name's
 * reference remembered by the key's text alone (a member's text holds the key's closing quote,
 * which a key's never does: no member's). */
static int put_number(State *st, Buf *b, const Field *f) {
    MemberCache *cache = st->members;
    unsigned long long hash = hash_text(f->key, f->key_len);
    Member *slot = member_slot(cache, hash, f->key, f->key_len);
    PyObject *made = NULL;
    if (!slot->bytes_len) {
        PyObject *key = key_of(f->key, f->key_len);
        if (!key) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a key checked as UTF-8 was not");
            return -1;
        }
        made = pf_ref(st, &st->arg_names, key);
        Py_DECREF(key);
        if (!made || member_remember(cache, slot, hash, f->key, f->key_len, PyBytes_AS_STRING(made),
                                     PyBytes_GET_SIZE(made)) < 0) {
            Py_XDECREF(made);
            return -1;
        }
    }
    const char *name = made ? PyBytes_AS_STRING(made) : cache->arena.data + slot->bytes_at;
    Py_ssize_t name_len = made ? PyBytes_GET_SIZE(made) : slot->bytes_len, value_len = 0;
    unsigned char scalar[11];
    if (f->kind == J_TRUE || f->kind == J_FALSE) {
        scalar[value_len++] = K_A_BOOL;
        scalar[value_len++] = f->kind == J_TRUE;
    } else if (f->kind == J_INT) {
        unsigned long long v = (unsigned long long)f->integer;
        scalar[value_len++] = K_A_INT;
        while (v >= 0x80) { scalar[value_len++] = (unsigned char)(v | 0x80); v >>= 7; }
        scalar[value_len++] = (unsigned char)v;
    } else {
        unsigned long long v;
        memcpy(&v, &f->number, 8);
        scalar[value_len++] = K_A_DOUBLE;
        for (int i = 0; i < 8; i++) scalar[value_len++] = (unsigned char)(v >> (8 * i));
    }
    int rc = buf_put(b, "\x22", 1) || buf_varint(b, name_len + value_len) || buf_put(b, name, name_len) ||
             buf_put(b, (const char *)scalar, value_len);
    Py_XDECREF(made);
    return rc ? -1 : 0;
}

static int put_field(State *st, Buf *b, const Field *f, Buf *scratch, const Buf *compact) {
    if (f->kind == J_NULL) return 0;  /* None: left out */
    /* a number, small int or not, or a bool, as pf_put_annotation would write it: with its text
     * remembered, ids (``correlation_id``) would fill the cache, and those past it go through
     * Python objects */
    if (f->kind != J_STRING && f->kind != J_NESTED) return put_number(st, b, f);
    /* a string or nested value, constant on a sequence: remembered by the member's JSON text from
     * its key to the end of its value, a string's with its closing quote (the string "5" is no 5):
     * one text, hashed and compared once */
    const char *text = f->key;
    Py_ssize_t text_len = f->value + f->value_len + (f->kind == J_STRING) - f->key;
    int nested = f->kind == J_NESTED;
    unsigned long long hash = hash_text(text, text_len);
    Member *slot = member_slot(st->members, hash, text, text_len);
    if (slot->bytes_len) return buf_put(b, st->members->arena.data + slot->bytes_at, slot->bytes_len);
    PyObject *key = key_of(f->key, f->key_len), *value = NULL;
    if (key)  /* a nested value: its compact JSON text, a string (as _annotation writes it) */
        value = nested ? PyUnicode_DecodeUTF8(compact->data + f->compact_at, f->compact_len, NULL)
                       : value_of(f, scratch);
    if (!key || !value) {
        Py_XDECREF(key);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "args checked as UTF-8 were not");
        return -1;
    }
    Py_ssize_t start = b->len;
    int rc = nested ? pf_put_text(st, b, key, value) : pf_put_annotation(st, b, key, value);
    Py_DECREF(key); Py_DECREF(value);
    if (rc == 0)
        rc = member_remember(st->members, slot, hash, text, text_len, b->data + start, b->len - start);
    return rc;
}

/* ``raw``'s annotations without a dict: 1 written, 0 left to the rule, -1 error. */
static int walk_args(State *st, Buf *b, PyObject *raw) {
    Field fields[MAX_MEMBERS];
    const char *text = PyBytes_AS_STRING(raw);
    Buf scratch = {0}, compact = {0};  /* unescaped strings; nested values' compact texts */
    int n = check_object(text, text + PyBytes_GET_SIZE(raw), fields, &compact), rc = 1;
    if (n < 0) rc = PyErr_Occurred() ? -1 : 0;
    for (int i = 0; i < n && rc > 0; i++)
        if (put_field(st, b, &fields[i], &scratch, &compact) < 0) rc = -1;
    PyMem_Free(scratch.data);
    PyMem_Free(compact.data);
    return rc;
}

/* A slice's args: a dict, or raw JSON (bytes, msgspec.Raw) decoded now, encoded once per text. */
int pf_put_args(State *st, Buf *b, PyObject *args) {
    if (PyDict_CheckExact(args)) return put_dict(st, b, args);
    PyObject *raw = PyBytes_CheckExact(args) ? (Py_INCREF(args), args) : PyObject_Bytes(args);
    if (!raw || (!st->raws && raw_caches_of(st) < 0)) { Py_XDECREF(raw); return -1; }
    const char *text = PyBytes_AS_STRING(raw);
    Py_ssize_t len = PyBytes_GET_SIZE(raw), start = b->len;  /* encoded into ``b``, remembered from there */
    unsigned long long hash = hash_text(text, len);
    Member *slot = member_slot(st->raws, hash, text, len);
    int rc;
    if (slot->bytes_len) {
        rc = buf_put(b, st->raws->arena.data + slot->bytes_at, slot->bytes_len);
    } else {
        rc = walk_args(st, b, raw);
        if (rc == 0) rc = put_decoded(st, b, raw);
        else if (rc > 0) rc = 0;
        if (rc == 0) rc = member_remember(st->raws, slot, hash, text, len, b->data + start, b->len - start);
    }
    Py_DECREF(raw);
    return rc;
}

