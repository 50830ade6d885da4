/*
 * laraq._speedups: the worker's hot unserialize path in C (its console lines are in _lines.c).
 *
 * pairs_loads(data, max_depth) reads one PHP-serialized array or object (the shape a queued command
 * has) and returns it built the way laraq.protocol.phparray.loads_php_arrays builds it: every PHP array a
 * PHPArray, objects PHPObject, enums PHPEnum, non-canonical floats PHPFloat. It accepts a strict
 * subset of the format and returns the `bail` marker for anything outside it (references, `C:`
 * objects, a count that does not match, a member too many, bytes after the end, over max_depth...):
 * the caller then takes the pure-Python codec, which decides (and reports errors) as it does without C.
 *
 * Untrusted input: no recursion (an explicit stack of at most max_depth frames), no allocation sized
 * by a declared count (containers grow as members arrive), every length checked against the bytes
 * that are left. Floats, enums and objects are finished by small Python callables the Python side
 * registers with configure(), so their rules live in one place (laraq/protocol/phpread.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

static PyObject *ArrayType = NULL;  /* laraq.protocol.phparray.PHPArray */
static PyObject *NewObject = NULL;  /* (class_name, props) -> PHPObject */
static PyObject *MakeFloat = NULL;  /* (lexeme bytes) -> float | PHPFloat | bail */
static PyObject *MakeEnum = NULL;   /* (payload bytes) -> PHPEnum | bail */
static PyObject *Bail = NULL;

#define MAX_FLOAT_LEXEME 1100
#define OK 1
#define NO 0     /* outside the subset: bail */
#define ERR (-1) /* a Python exception is set */

typedef const unsigned char *cur_t;

/* 1..maxd decimal digits; a value past what fits is clamped to PY_SSIZE_T_MAX (every caller bails on it). */
static int read_uint(cur_t *pp, cur_t end, int maxd, Py_ssize_t *out) {
    cur_t p = *pp;
    Py_ssize_t v = 0;
    int digits = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        if (++digits > maxd) return NO;
        int d = *p - '0';
        v = (v > (PY_SSIZE_T_MAX - d) / 10) ? PY_SSIZE_T_MAX : v * 10 + d;
        p++;
    }
    if (!digits) return NO;
    *pp = p;
    *out = v;
    return OK;
}

/* [+-]? 1..25 digits, inside PHP's 64-bit range. */
static int read_int(cur_t *pp, cur_t end, long long *out) {
    cur_t p = *pp;
    int neg = 0, digits = 0;
    unsigned long long mag = 0;
    const unsigned long long limit = 9223372036854775808ULL; /* |PHP_INT_MIN| */
    if (p < end && (*p == '+' || *p == '-')) {
        neg = *p == '-';
        p++;
    }
    while (p < end && *p >= '0' && *p <= '9') {
        if (++digits > 25) return NO;
        unsigned long long d = (unsigned long long)(*p - '0');
        /* checked before multiplying: mag * 10 must not wrap (unchecked, 39223372036854775807 would read
         * as 2329883889435672575); past |PHP_INT_MIN| the value is only remembered as out of range */
        if (mag > limit || mag > (limit - d) / 10) mag = limit + 1;
        else mag = mag * 10 + d;
        p++;
    }
    if (!digits) return NO;
    if (neg ? mag > limit : mag > limit - 1) return NO;
    *out = neg ? (mag == limit ? INT64_MIN : -(long long)mag) : (long long)mag;
    *pp = p;
    return OK;
}

static int expect(cur_t *pp, cur_t end, const char *text) {
    size_t n = strlen(text);
    if ((size_t)(end - *pp) < n || memcmp(*pp, text, n) != 0) return NO;
    *pp += n;
    return OK;
}

/* s:<len>:"<len bytes>";  at *pp (any byte may be inside: the length says where it ends). */
static int read_str(cur_t *pp, cur_t end, cur_t *s, Py_ssize_t *len) {
    cur_t p = *pp;
    if (expect(&p, end, "s:") != OK || read_uint(&p, end, 20, len) != OK || expect(&p, end, ":\"") != OK)
        return NO;
    if (*len > end - p || end - p - *len < 2 || p[*len] != '"' || p[*len + 1] != ';') return NO;
    *s = p;
    *pp = p + *len + 2;
    return OK;
}

/* UTF-8 text as str, anything else as bytes (the codec's rule for strings and keys). */
static PyObject *text_or_bytes(cur_t s, Py_ssize_t len) {
    PyObject *u = PyUnicode_DecodeUTF8((const char *)s, len, NULL);
    if (u != NULL) return u;
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return NULL;
    PyErr_Clear();
    return PyBytes_FromStringAndSize((const char *)s, len);
}

/* Short ASCII strings repeat from one command to the next: the property names a class declares, its
 * name, a queue's or connection's name. A direct-mapped table of STR_CACHE_SLOTS such str objects hands
 * the same one back when the bytes match (no decode, no new object, its hash already computed for the
 * dict it goes in). Fixed size whatever the input: a payload can only replace entries, never add any. */
#define STR_CACHE_SLOTS 512
#define STR_CACHE_MAX_LEN 64
static PyObject *str_cache[STR_CACHE_SLOTS];

static PyObject *text_or_bytes_cached(cur_t s, Py_ssize_t len) {
    if (len > STR_CACHE_MAX_LEN) return text_or_bytes(s, len);
    uint32_t h = 2166136261u ^ (uint32_t)len; /* FNV-1a over the bytes */
    for (Py_ssize_t i = 0; i < len; i++) h = (h ^ s[i]) * 16777619u;
    PyObject **slot = &str_cache[(h ^ (h >> 16)) & (STR_CACHE_SLOTS - 1)];
    PyObject *c = *slot;
    if (c != NULL && PyUnicode_GET_LENGTH(c) == len && memcmp(PyUnicode_DATA(c), s, (size_t)len) == 0)
        return Py_NewRef(c);
    PyObject *u = text_or_bytes(s, len);
    if (u != NULL && PyUnicode_CheckExact(u) && PyUnicode_IS_COMPACT_ASCII(u)) {
        if (PyObject_Hash(u) == -1) {
            Py_DECREF(u);
            return NULL;
        }
        Py_XSETREF(*slot, Py_NewRef(u));
    }
    return u;
}

/* "\0" + non-empty class (or "*") + "\0" + non-empty name: PHP's rule for a mangled property name. */
static int valid_mangled(cur_t s, Py_ssize_t len) {
    if (len < 3 || s[1] == 0) return 0;
    const unsigned char *nul = memchr(s + 1, 0, (size_t)(len - 1));
    return nul != NULL && nul - s < len - 1;
}

static int class_char(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '\\'
           || c >= 0x80;
}

#define PRESIZE_MAX 64

/* a:<n>:{  or  O:<len>:"<Class>":<n>:{  at *pp. Sets *d (a new container) and *cls (the class name for
 * an object, else NULL). `room`: the bytes a member count is checked against. */
static int open_container(cur_t *pp, cur_t end, Py_ssize_t room, PyObject **d, PyObject **cls, Py_ssize_t *n) {
    cur_t p = *pp;
    *cls = NULL;
    if (p >= end) return NO;
    if (*p == 'a') {
        p++;
        if (expect(&p, end, ":") != OK || read_uint(&p, end, 20, n) != OK || expect(&p, end, ":{") != OK) return NO;
    } else if (*p == 'O') {
        Py_ssize_t clen;
        p++;
        if (expect(&p, end, ":") != OK || read_uint(&p, end, 20, &clen) != OK || expect(&p, end, ":\"") != OK)
            return NO;
        cur_t c = p;
        while (p < end && class_char(*p)) p++;
        if (p == c || p - c != clen) return NO;
        if (expect(&p, end, "\":") != OK || read_uint(&p, end, 20, n) != OK || expect(&p, end, ":{") != OK)
            return NO;
        *cls = text_or_bytes_cached(c, clen);
        if (*cls == NULL) return ERR;
        if (!PyUnicode_Check(*cls)) {
            Py_CLEAR(*cls);
            return NO;
        }
    } else {
        return NO;
    }
    /* the smallest member ("i:0;N;") is 6 bytes */
    if (*n > (PY_SSIZE_T_MAX - 1) / 6 || *n * 6 + 1 > room) {
        Py_CLEAR(*cls);
        return NO;
    }
    /* an object's properties: sized for its count up front (no resize on the way), at most
     * PRESIZE_MAX (the count is the payload's to declare) */
    *d = *cls != NULL ? _PyDict_NewPresized(*n < PRESIZE_MAX ? *n : PRESIZE_MAX) : PyObject_CallNoArgs(ArrayType);
    if (*d == NULL) {
        Py_CLEAR(*cls);
        return ERR;
    }
    *pp = p;
    return OK;
}

/* A key at *pp: s:..; or i:..;  (a mangled name is checked inside objects). */
static int read_key(cur_t *pp, cur_t end, int in_object, PyObject **key) {
    cur_t p = *pp;
    if (p < end && *p == 's') {
        cur_t s;
        Py_ssize_t len;
        if (read_str(&p, end, &s, &len) != OK) return NO;
        if (in_object && len > 0 && s[0] == 0 && !valid_mangled(s, len)) return NO;
        *key = text_or_bytes_cached(s, len);
    } else if (p < end && *p == 'i') {
        long long v;
        p++;
        if (expect(&p, end, ":") != OK || read_int(&p, end, &v) != OK || expect(&p, end, ";") != OK) return NO;
        *key = PyLong_FromLongLong(v);
    } else {
        return NO;
    }
    if (*key == NULL) return ERR;
    *pp = p;
    return OK;
}

/* A scalar value at *pp (not a container). */
static int read_scalar(cur_t *pp, cur_t end, PyObject **value) {
    cur_t p = *pp;
    PyObject *v = NULL;
    if (p >= end) return NO;
    switch (*p) {
    case 's': {
        cur_t s;
        Py_ssize_t len;
        if (read_str(&p, end, &s, &len) != OK) return NO;
        v = text_or_bytes_cached(s, len);
        break;
    }
    case 'N':
        if (expect(&p, end, "N;") != OK) return NO;
        v = Py_NewRef(Py_None);
        break;
    case 'i': {
        long long n;
        p++;
        if (expect(&p, end, ":") != OK || read_int(&p, end, &n) != OK || expect(&p, end, ";") != OK) return NO;
        v = PyLong_FromLongLong(n);
        break;
    }
    case 'b':
        if (expect(&p, end, "b:0;") == OK) v = Py_NewRef(Py_False);
        else if (expect(&p, end, "b:1;") == OK) v = Py_NewRef(Py_True);
        else return NO;
        break;
    case 'd': {
        p++;
        if (expect(&p, end, ":") != OK) return NO;
        cur_t s = p;
        while (p < end && *p != ';' && p - s < MAX_FLOAT_LEXEME) p++;
        if (p >= end || *p != ';' || p == s) return NO;
        PyObject *raw = PyBytes_FromStringAndSize((const char *)s, p - s);
        if (raw == NULL) return ERR;
        v = PyObject_CallOneArg(MakeFloat, raw);
        Py_DECREF(raw);
        p++;
        break;
    }
    case 'E': {
        Py_ssize_t len;
        p++;
        if (expect(&p, end, ":") != OK || read_uint(&p, end, 20, &len) != OK || expect(&p, end, ":\"") != OK)
            return NO;
        if (len > end - p || end - p - len < 2 || p[len] != '"' || p[len + 1] != ';') return NO;
        if (memchr(p, '"', (size_t)len) != NULL) return NO; /* as the Python tokenizer: no quote inside */
        PyObject *raw = PyBytes_FromStringAndSize((const char *)p, len);
        if (raw == NULL) return ERR;
        v = PyObject_CallOneArg(MakeEnum, raw);
        Py_DECREF(raw);
        p += len + 2;
        break;
    }
    default:
        return NO;
    }
    if (v == NULL) return ERR;
    if (v == Bail) {
        Py_DECREF(v);
        return NO;
    }
    *value = v;
    *pp = p;
    return OK;
}

typedef struct {
    PyObject *d;   /* the container being filled (owned) */
    PyObject *cls; /* its class name when it is an object's properties (owned), else NULL */
    PyObject *key; /* where it goes in its parent (owned; NULL at the top) */
    Py_ssize_t n, rem;
} Frame;

static void clear_frame(Frame *f) {
    Py_CLEAR(f->d);
    Py_CLEAR(f->cls);
    Py_CLEAR(f->key);
}

#define INLINE_FRAMES 16

/* Room for one more frame: double the capacity (at most max_depth), moving off the C stack the first
 * time; the new frames are zeroed, so the cleanup may clear any frame below the capacity. */
static int grow_frames(Frame **stack, Frame *inline_frames, Py_ssize_t *cap, int max_depth) {
    Py_ssize_t old = *cap, grown = old * 2 < max_depth ? old * 2 : max_depth;
    Frame *bigger;
    if (*stack == inline_frames) {
        bigger = PyMem_Malloc((size_t)grown * sizeof(Frame));
        if (bigger != NULL) memcpy(bigger, inline_frames, (size_t)old * sizeof(Frame));
    } else {
        bigger = PyMem_Realloc(*stack, (size_t)grown * sizeof(Frame));
    }
    if (bigger == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(bigger + old, 0, (size_t)(grown - old) * sizeof(Frame));
    *stack = bigger;
    *cap = grown;
    return 0;
}

/* The finished container of frame `f`: the PHPArray itself, or the PHPObject made from its properties. */
static PyObject *finish(Frame *f) {
    if (f->cls == NULL) return Py_NewRef(f->d);
    return PyObject_CallFunctionObjArgs(NewObject, f->cls, f->d, NULL);
}

static PyObject *pairs_loads(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *data;
    int max_depth;
    if (!PyArg_ParseTuple(args, "Oi:pairs_loads", &data, &max_depth)) return NULL;
    if (ArrayType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "laraq._speedups.configure() was not called");
        return NULL;
    }
    if (max_depth < 1 || max_depth > 100000) return Py_NewRef(Bail);
    /* bytes, or an ASCII str read in place (its characters are its UTF-8 bytes: no copy of a big
     * command); any other str is the caller's to encode */
    Py_ssize_t size;
    cur_t p;
    if (PyBytes_CheckExact(data)) {
        size = PyBytes_GET_SIZE(data);
        p = (cur_t)PyBytes_AS_STRING(data);
    } else if (PyUnicode_CheckExact(data) && PyUnicode_IS_COMPACT_ASCII(data)) {
        size = PyUnicode_GET_LENGTH(data);
        p = (cur_t)PyUnicode_DATA(data);
    } else {
        return Py_NewRef(Bail);
    }
    cur_t end = p + size;
    /* A command nests a few levels deep: the frames start on the C stack and move to the heap only
     * past INLINE_FRAMES, growing with the depth reached (never sized by max_depth up front: zeroing
     * 512 frames, 20 KB, per job cost more than the rest of the parse's memory traffic). */
    Frame inline_frames[INLINE_FRAMES];
    Frame *stack = inline_frames;
    Py_ssize_t cap = max_depth < INLINE_FRAMES ? max_depth : INLINE_FRAMES;
    memset(stack, 0, (size_t)cap * sizeof(Frame));
    Py_ssize_t depth = 0; /* frames in use: stack[depth - 1] is the open container */
    PyObject *result = NULL, *key = NULL, *value = NULL;
    int r;

    r = open_container(&p, end, size, &stack[0].d, &stack[0].cls, &stack[0].n);
    if (r != OK) goto done_r;
    stack[0].rem = stack[0].n;
    /* the top's count is checked against the bytes after its header, as the Python path does */
    if (stack[0].n * 6 + 1 > end - p) {
        r = NO;
        goto done_r;
    }
    depth = 1;
    for (;;) {
        Frame *f = &stack[depth - 1];
        if (p >= end) {
            r = NO; /* the input ended inside a container */
            goto done_r;
        }
        if (*p == '}') {
            p++;
            if (f->rem || PyDict_GET_SIZE(f->d) != f->n) {
                r = NO; /* fewer members than declared, or a key twice */
                goto done_r;
            }
            value = finish(f);
            if (value == NULL) {
                r = ERR;
                goto done_r;
            }
            if (depth == 1) {
                if (p != end) {
                    Py_CLEAR(value);
                    r = NO; /* bytes after the end */
                    goto done_r;
                }
                result = value;
                value = NULL;
                r = OK;
                goto done_r;
            }
            key = f->key;
            f->key = NULL;
            clear_frame(f);
            depth--;
            f = &stack[depth - 1];
            if (PyDict_SetItem(f->d, key, value) < 0) {
                r = ERR;
                goto done_r;
            }
            Py_CLEAR(key);
            Py_CLEAR(value);
            continue;
        }
        if (f->rem == 0) {
            r = NO; /* a member too many */
            goto done_r;
        }
        r = read_key(&p, end, f->cls != NULL, &key);
        if (r != OK) goto done_r;
        f->rem--;
        if (p < end && (*p == 'a' || *p == 'O')) {
            if (depth >= max_depth) { /* as the Python path counts: at most max_depth containers */
                r = NO;
                goto done_r;
            }
            if (depth >= cap && grow_frames(&stack, inline_frames, &cap, max_depth) < 0) {
                r = ERR;
                goto done_r;
            }
            Frame *child = &stack[depth];
            r = open_container(&p, end, size, &child->d, &child->cls, &child->n);
            if (r != OK) goto done_r;
            child->rem = child->n;
            child->key = key;
            key = NULL;
            depth++;
            continue;
        }
        r = read_scalar(&p, end, &value);
        if (r != OK) goto done_r;
        if (PyDict_SetItem(f->d, key, value) < 0) {
            r = ERR;
            goto done_r;
        }
        Py_CLEAR(key);
        Py_CLEAR(value);
    }

done_r:
    Py_XDECREF(key);
    Py_XDECREF(value);
    for (Py_ssize_t i = 0; i <= depth && i < cap; i++) /* the frames in use and one being opened */
        clear_frame(&stack[i]);
    if (stack != inline_frames) PyMem_Free(stack);
    if (r == ERR) {
        Py_XDECREF(result);
        return NULL;
    }
    if (r == NO) {
        Py_XDECREF(result);
        return Py_NewRef(Bail);
    }
    return result;
}

static PyObject *configure(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *array_type, *new_object, *make_float, *make_enum, *bail;
    if (!PyArg_ParseTuple(args, "OOOOO:configure", &array_type, &new_object, &make_float, &make_enum, &bail))
        return NULL;
    Py_XSETREF(ArrayType, Py_NewRef(array_type));
    Py_XSETREF(NewObject, Py_NewRef(new_object));
    Py_XSETREF(MakeFloat, Py_NewRef(make_float));
    Py_XSETREF(MakeEnum, Py_NewRef(make_enum));
    Py_XSETREF(Bail, Py_NewRef(bail));
    Py_RETURN_NONE;
}

/* Hand memory the allocator holds but no object uses back to the system (glibc's malloc_trim: the
 * heap's top and whole free pages inside it). Returns True when something was released; False where
 * the C library has no such call. The --memory check uses it before it counts the process as over. */
static PyObject *release_free_memory(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
#if defined(__GLIBC__)
    int released;
    Py_BEGIN_ALLOW_THREADS
    released = malloc_trim(0);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(released);
#else
    Py_RETURN_FALSE;
#endif
}

/* True when the JSON text ``data`` nests arrays and objects ``limit`` levels deep or more, strings
 * (with their backslash escapes) skipped: the depth check of laraq/protocol/phpjson.py
 * (check_json_depth) in one pass, without building anything. */
static PyObject *json_too_deep(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "y*n", &view, &limit)) return NULL;
    const unsigned char *p = view.buf, *end = p + view.len;
    Py_ssize_t depth = 0;
    int deep = 0;
    Py_BEGIN_ALLOW_THREADS
    while (p < end) {
        unsigned char c = *p++;
        if (c == '"') {
            while (p < end) {
                unsigned char d = *p++;
                if (d == '\\') {
                    if (p < end) p++;
                } else if (d == '"') {
                    break;
                }
            }
        } else if (c == '[' || c == '{') {
            if (++depth >= limit) {
                deep = 1;
                break;
            }
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyBool_FromLong(deep);
}

/* 1 when ``value`` (a list or dict at nesting ``level``, the outermost being 1) holds a list or dict at
 * level ``limit`` or deeper, else 0. Recursion is bounded by ``limit``. */
static int value_reaches(PyObject *value, Py_ssize_t level, Py_ssize_t limit) {
    if (PyDict_Check(value)) {
        if (level >= limit) return 1;
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (PyDict_Next(value, &pos, &key, &item)) {
            if ((PyDict_Check(item) || PyList_Check(item)) && value_reaches(item, level + 1, limit)) return 1;
        }
    } else if (PyList_Check(value)) {
        if (level >= limit) return 1;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value); i++) {
            PyObject *item = PyList_GET_ITEM(value, i);
            if ((PyDict_Check(item) || PyList_Check(item)) && value_reaches(item, level + 1, limit)) return 1;
        }
    }
    return 0;
}

/* True when a decoded JSON value (dicts, lists and scalars, as orjson or json builds them) nests lists
 * and dicts ``limit`` levels deep or more: check_json_depth's rule, asked of a parsed document. */
static PyObject *value_too_deep(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *value;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "On", &value, &limit)) return NULL;
    return PyBool_FromLong(value_reaches(value, 1, limit));
}

static PyMethodDef methods[] = {
    {"release_free_memory", release_free_memory, METH_NOARGS,
     "release_free_memory() -> bool: malloc_trim(0) where glibc has it (memory freed but still held)."},
    {"pairs_loads", pairs_loads, METH_VARARGS,
     "pairs_loads(data: bytes | ASCII str, max_depth: int) -> value, or the bail marker outside the fast subset."},
    {"json_too_deep", json_too_deep, METH_VARARGS,
     "json_too_deep(data: bytes, limit: int) -> bool: arrays and objects nested limit levels deep or more."},
    {"value_too_deep", value_too_deep, METH_VARARGS,
     "value_too_deep(value, limit: int) -> bool: a parsed document nests lists and dicts limit levels deep or more."},
    {"configure", configure, METH_VARARGS,
     "configure(array_type, new_object, make_float, make_enum, bail): the Python pieces pairs_loads uses."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "laraq._speedups",
                                    "The worker's hot paths in C: unserialize (laraq/protocol/phpread.py), the JSON depth check (laraq/protocol/phpjson.py) and console lines (laraq/cli/linesink.py).", -1,
                                    methods, NULL, NULL, NULL, NULL};

int laraq_add_line_sink(PyObject *module); /* laraq/_lines.c */

PyMODINIT_FUNC PyInit__speedups(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && laraq_add_line_sink(m) < 0) Py_CLEAR(m);
    return m;
}
