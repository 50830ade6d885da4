/*
 * laraq._speedups.LineSink: the worker's console lines, written in C.
 *
 * laraq/cli/linesink.py holds the pure-Python sink with the same contract and says what it is; this file
 * is its twin for a stream with a real file descriptor. In short: every write is one write() of whole
 * lines, made under the sink's own lock with the GIL released for the system call, so the lines of
 * concurrent threads never interleave. A success line reported by the holding thread (hold()) waits
 * in the buffer and goes out in the same write() as the next line, or at flush() / release().
 * Write errors (a closed pipe) drop the text and never reach the worker; a signal handler's exception
 * does.
 *
 * On top of that, started(job) and succeeded(job, runtime=None) print a job's first and last line,
 * the two lines every job has. Their wording stays in laraq/cli/output.py: configure() hands over each
 * line as a template, a tuple of literal UTF-8 pieces (bytes) and slots (ints: the date, the job's id,
 * its name, the run of dots, the run time). The table of started jobs is Output's own dict, so its
 * other lines (failures, releases) find what started() recorded. A job's id and name come from its
 * payload: one that holds a control character (or any non-ASCII text) goes through the escaper
 * configure() is given (laraq.logtext.visible), so what the line shows is what Python would print.
 * The date is the app's local time, as artisan's: configure() may give a formatter (a unix second ->
 * "Y-m-d H:i:s" in the app's timezone), called once per second; without one it is UTC.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <pythread.h>
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { SLOT_DATE = 0, SLOT_IDENT = 1, SLOT_NAME = 2, SLOT_DOTS = 3, SLOT_RUNTIME = 4, SLOT_COUNT = 5 };
#define MAX_PIECES 24

typedef struct {
    int slot;         /* -1: a literal */
    const char *data; /* the literal's bytes (owned by the template tuple) */
    Py_ssize_t len;
} Piece;

typedef struct {
    PyObject *tuple; /* keeps the literals alive; NULL: no such line */
    Piece pieces[MAX_PIECES];
    int count;
    int has_runtime;
    Py_ssize_t width; /* dots = max(width - len(name) - len(run time), 0) */
} Template;

typedef struct {
    PyObject_HEAD
    int fd;
    PyObject *stream; /* flushed once, before the first write: text others printed may sit in its buffer */
    int pending;
    PyThread_type_lock lock;
    char *buf; /* held lines, then the text being written */
    Py_ssize_t len, cap;
    int holding;
    unsigned long holder; /* the thread whose success lines may wait */
    Py_ssize_t writes;    /* write() calls made */
    /* configure(): the per-job lines */
    PyObject *started; /* Output._started: id(job) -> (monotonic start, id, name) */
    Py_ssize_t max_started;
    Template start, done;
    PyObject *run_time; /* seconds -> str, for runs of a second or more */
    PyObject *visible;  /* str -> str with its control characters escaped; NULL: shown as they are */
    PyObject *date_fn;  /* unix second -> "Y-m-d H:i:s" in the app's timezone; NULL: UTC, formatted here */
    time_t date_sec;
    char date[64];
    Py_ssize_t date_len;
} LineSink;

static PyObject *str_id, *str_name, *str_flush, *str_empty;

/* -- buffer, lock and write ----------------------------------------------------------------------- */

/* Room for n more bytes. */
static int buf_reserve(LineSink *s, Py_ssize_t n) {
    if (n > PY_SSIZE_T_MAX / 4 - s->len) {
        PyErr_NoMemory();
        return -1;
    }
    if (s->len + n <= s->cap) return 0;
    Py_ssize_t cap = s->cap ? s->cap : 1024;
    while (cap < s->len + n) cap *= 2;
    char *grown = PyMem_Realloc(s->buf, (size_t)cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    s->buf = grown;
    s->cap = cap;
    return 0;
}

static int buf_add(LineSink *s, const char *data, Py_ssize_t n) {
    if (n <= 0) return 0;
    if (buf_reserve(s, n) < 0) return -1;
    memcpy(s->buf + s->len, data, (size_t)n);
    s->len += n;
    return 0;
}

static int buf_fill(LineSink *s, char c, Py_ssize_t n) {
    if (n <= 0) return 0;
    if (buf_reserve(s, n) < 0) return -1;
    memset(s->buf + s->len, c, (size_t)n);
    s->len += n;
    return 0;
}

/* Take the sink's lock. Never wait for it while holding the GIL: the thread that has it may need the
 * GIL back to finish its write. Waiting stays interruptible, as threading.Lock.acquire() is. */
static int sink_lock(LineSink *s) {
    if (PyThread_acquire_lock(s->lock, NOWAIT_LOCK)) return 0;
    for (;;) {
        PyLockStatus r;
        Py_BEGIN_ALLOW_THREADS
        r = PyThread_acquire_lock_timed(s->lock, -1, 1);
        Py_END_ALLOW_THREADS
        if (r == PY_LOCK_ACQUIRED) return 0;
        if (r == PY_LOCK_INTR && PyErr_CheckSignals() < 0) return -1;
    }
}

static void sink_unlock(LineSink *s) { PyThread_release_lock(s->lock); }

/* Write the whole buffer in one write() (more only after a short write), with the GIL released. The
 * lock is held. -1 only when a signal handler raised; any other error drops the text. */
static int sink_write_locked(LineSink *s) {
    if (s->len == 0) return 0;
    if (s->pending) {
        s->pending = 0;
        if (s->stream != Py_None) {
            PyObject *r = PyObject_CallMethodNoArgs(s->stream, str_flush);
            if (r == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_OSError) && !PyErr_ExceptionMatches(PyExc_ValueError)) {
                    s->len = 0;
                    return -1;
                }
                PyErr_Clear();
            }
            Py_XDECREF(r);
        }
    }
    Py_ssize_t off = 0;
    s->writes++;
    while (off < s->len) {
        ssize_t n;
        int err;
        Py_BEGIN_ALLOW_THREADS
        n = write(s->fd, s->buf + off, (size_t)(s->len - off));
        err = errno;
        Py_END_ALLOW_THREADS
        if (n >= 0) {
            off += n;
            continue;
        }
        if (err == EINTR) {
            if (PyErr_CheckSignals() < 0) {
                s->len = 0;
                return -1;
            }
            continue;
        }
        break; /* EPIPE, EBADF, EAGAIN...: a closed pipe must never break the worker */
    }
    s->len = 0;
    if (s->cap > (1 << 20)) { /* a huge line once: do not keep its buffer */
        PyMem_Free(s->buf);
        s->buf = NULL;
        s->cap = 0;
    }
    return 0;
}

/* str -> its UTF-8; lone surrogates become '?' as str.encode("utf-8", "replace") makes them. */
static const char *utf8_of(PyObject *text, PyObject **keep, Py_ssize_t *len) {
    const char *p = PyUnicode_AsUTF8AndSize(text, len);
    if (p != NULL) return p;
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return NULL;
    PyErr_Clear();
    *keep = PyUnicode_AsEncodedString(text, "utf-8", "replace");
    if (*keep == NULL) return NULL;
    *len = PyBytes_GET_SIZE(*keep);
    return PyBytes_AS_STRING(*keep);
}

static int holding_here(LineSink *s) { return s->holding && s->holder == PyThread_get_thread_ident(); }

/* Add text to the buffer; write unless it is a success line the holding thread may hold. */
static PyObject *sink_put(LineSink *s, PyObject *text, int may_hold) {
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "LineSink takes str, not %.100s", Py_TYPE(text)->tp_name);
        return NULL;
    }
    PyObject *keep = NULL;
    Py_ssize_t n;
    const char *data = utf8_of(text, &keep, &n);
    if (data == NULL) return NULL;
    if (sink_lock(s) < 0) {
        Py_XDECREF(keep);
        return NULL;
    }
    int r = buf_add(s, data, n);
    if (r == 0 && !(may_hold && holding_here(s))) r = sink_write_locked(s);
    sink_unlock(s);
    Py_XDECREF(keep);
    if (r < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *sink_write(LineSink *s, PyObject *text) { return sink_put(s, text, 0); }

static PyObject *sink_success(LineSink *s, PyObject *text) { return sink_put(s, text, 1); }

static PyObject *sink_flush(LineSink *s, PyObject *Py_UNUSED(ignored)) {
    if (s->len == 0) Py_RETURN_NONE; /* read under the GIL: nothing held, nothing to take the lock for */
    if (sink_lock(s) < 0) return NULL;
    int r = sink_write_locked(s);
    sink_unlock(s);
    if (r < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *sink_hold(LineSink *s, PyObject *Py_UNUSED(ignored)) {
    s->holder = PyThread_get_thread_ident();
    s->holding = 1;
    Py_RETURN_NONE;
}

static PyObject *sink_release(LineSink *s, PyObject *Py_UNUSED(ignored)) {
    s->holding = 0;
    return sink_flush(s, NULL);
}

/* -- the two lines every job has ------------------------------------------------------------------ */

static double monotonic_now(void) { /* as time.monotonic() reads it: nanoseconds, then seconds */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)((long long)ts.tv_sec * 1000000000LL + ts.tv_nsec) / 1e9;
}

/* Y-m-d H:i:s of now, formatted once per second: by date_fn (the app's timezone) when configure() gave
 * one, else in UTC here. Called before the sink's lock is taken (date_fn is Python code). */
static int refresh_date(LineSink *s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (s->date_len && ts.tv_sec == s->date_sec) return 0;
    if (s->date_fn != NULL) {
        PyObject *sec = PyLong_FromLongLong((long long)ts.tv_sec);
        PyObject *text = sec == NULL ? NULL : PyObject_CallOneArg(s->date_fn, sec);
        Py_XDECREF(sec);
        if (text == NULL) return -1;
        Py_ssize_t len;
        const char *data = PyUnicode_Check(text) ? PyUnicode_AsUTF8AndSize(text, &len) : NULL;
        if (data == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "the date formatter must return str");
            Py_DECREF(text);
            return -1;
        }
        if (len >= (Py_ssize_t)sizeof s->date) len = (Py_ssize_t)sizeof s->date - 1;
        memcpy(s->date, data, (size_t)len);
        Py_DECREF(text);
        s->date_len = len;
        s->date_sec = ts.tv_sec;
        return 0;
    }
    struct tm tm;
    time_t sec = ts.tv_sec;
    gmtime_r(&sec, &tm);
    s->date_len = (Py_ssize_t)strftime(s->date, sizeof s->date, "%Y-%m-%d %H:%M:%S", &tm);
    s->date_sec = ts.tv_sec;
    return 0;
}

/* Whether a str may hold a character the escaper changes: a control character of ASCII, or any
 * non-ASCII one (the escaper tells those apart; a plain ASCII name, the usual case, costs one scan). */
static int may_need_escape(PyObject *text) {
    if (!PyUnicode_IS_ASCII(text)) return 1;
    const unsigned char *p = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] == 0x7f) return 1;
    return 0;
}

/* ``text`` as the escaper shows it (a new reference; steals ``text``). */
static PyObject *shown(LineSink *s, PyObject *text) {
    if (text == NULL || s->visible == NULL || !may_need_escape(text)) return text;
    PyObject *escaped = PyObject_CallOneArg(s->visible, text);
    Py_DECREF(text);
    if (escaped != NULL && !PyUnicode_Check(escaped)) {
        PyErr_SetString(PyExc_TypeError, "the escaper must return str");
        Py_CLEAR(escaped);
    }
    return escaped;
}

/* A job's id (``job.id or ""``) and name, as str and as shown (see ``visible``). New references. */
static int job_identity(LineSink *s, PyObject *job, PyObject **ident, PyObject **name) {
    PyObject *id = PyObject_GetAttr(job, str_id);
    if (id == NULL) return -1;
    int truth = PyObject_IsTrue(id);
    if (truth < 0) {
        Py_DECREF(id);
        return -1;
    }
    if (!truth)
        Py_SETREF(id, Py_NewRef(str_empty));
    else if (!PyUnicode_Check(id))
        Py_SETREF(id, PyObject_Str(id));
    id = shown(s, id);
    if (id == NULL) return -1;
    PyObject *nm = PyObject_GetAttr(job, str_name);
    if (nm != NULL && !PyUnicode_Check(nm)) Py_SETREF(nm, PyObject_Str(nm));
    nm = shown(s, nm);
    if (nm == NULL) {
        Py_DECREF(id);
        return -1;
    }
    *ident = id;
    *name = nm;
    return 0;
}

/* Render a template into the buffer (the lock is held). */
static int render(LineSink *s, const Template *t, PyObject *ident, PyObject *name, PyObject *runtime) {
    PyObject *keep_id = NULL, *keep_name = NULL;
    Py_ssize_t id_len = 0, name_len = 0, rt_len = 0;
    const char *id_data = utf8_of(ident, &keep_id, &id_len);
    if (id_data == NULL) return -1;
    const char *name_data = utf8_of(name, &keep_name, &name_len);
    const char *rt_data = "";
    int r = name_data == NULL ? -1 : 0;
    if (r == 0 && runtime != NULL) {
        rt_data = PyUnicode_AsUTF8AndSize(runtime, &rt_len);
        if (rt_data == NULL) r = -1;
    }
    if (r == 0) {
        Py_ssize_t dots = t->width - PyUnicode_GET_LENGTH(name) - (runtime ? PyUnicode_GET_LENGTH(runtime) : 0);
        for (int i = 0; i < t->count && r == 0; i++) {
            const Piece *p = &t->pieces[i];
            switch (p->slot) {
            case SLOT_DATE: r = buf_add(s, s->date, s->date_len); break;
            case SLOT_IDENT: r = buf_add(s, id_data, id_len); break;
            case SLOT_NAME: r = buf_add(s, name_data, name_len); break;
            case SLOT_DOTS: r = buf_fill(s, '.', dots); break;
            case SLOT_RUNTIME: r = buf_add(s, rt_data, rt_len); break;
            default: r = buf_add(s, p->data, p->len);
            }
        }
    }
    Py_XDECREF(keep_id);
    Py_XDECREF(keep_name);
    return r;
}

/* Render a job's line and write it (or, for a success line on the holding thread, hold it). */
static int emit(LineSink *s, const Template *t, PyObject *ident, PyObject *name, PyObject *runtime, int may_hold) {
    if (refresh_date(s) < 0) return -1;
    if (sink_lock(s) < 0) return -1;
    Py_ssize_t before = s->len;
    int r = render(s, t, ident, name, runtime);
    if (r < 0)
        s->len = before; /* nothing half-rendered goes out */
    else if (!(may_hold && holding_here(s)))
        r = sink_write_locked(s);
    sink_unlock(s);
    return r;
}

static int check_configured(LineSink *s) {
    if (s->started != NULL) return 0;
    PyErr_SetString(PyExc_RuntimeError, "LineSink.configure() was not called");
    return -1;
}

static PyObject *sink_started(LineSink *s, PyObject *job) {
    if (check_configured(s) < 0) return NULL;
    PyObject *ident, *name, *key = NULL, *entry = NULL;
    if (job_identity(s, job, &ident, &name) < 0) return NULL;
    int r = -1;
    if (PyDict_GET_SIZE(s->started) >= s->max_started) { /* an abandoned job never ends here: forget the oldest */
        Py_ssize_t pos = 0;
        PyObject *oldest, *value;
        if (PyDict_Next(s->started, &pos, &oldest, &value)) {
            Py_INCREF(oldest);
            int d = PyDict_DelItem(s->started, oldest);
            Py_DECREF(oldest);
            if (d < 0) goto done;
        }
    }
    key = PyLong_FromVoidPtr(job); /* id(job) */
    entry = key == NULL ? NULL : Py_BuildValue("(dOO)", monotonic_now(), ident, name);
    if (entry == NULL || PyDict_SetItem(s->started, key, entry) < 0) goto done;
    r = s->start.tuple == NULL ? 0 : emit(s, &s->start, ident, name, NULL, 0);
done:
    Py_XDECREF(key);
    Py_XDECREF(entry);
    Py_DECREF(ident);
    Py_DECREF(name);
    if (r < 0) return NULL;
    Py_RETURN_NONE;
}

/* "12.34ms" below a second, as laraq.cli.output.format_run_time writes it; longer runs ask it. */
static PyObject *run_time_text(LineSink *s, double seconds) {
    double ms = seconds * 1000;
    if (ms < 999.99) {
        char *digits = PyOS_double_to_string(ms, 'f', 2, 0, NULL);
        if (digits == NULL) return NULL;
        PyObject *text = PyUnicode_FromFormat("%sms", digits);
        PyMem_Free(digits);
        return text;
    }
    PyObject *value = PyFloat_FromDouble(seconds);
    if (value == NULL) return NULL;
    PyObject *text = PyObject_CallOneArg(s->run_time, value);
    Py_DECREF(value);
    if (text != NULL && !PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "the run time formatter must return str");
        Py_CLEAR(text);
    }
    return text;
}

static PyObject *sink_succeeded(LineSink *s, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs < 1 || nargs + nkw > 2 ||
        (nkw == 1 && !PyUnicode_Check(PyTuple_GET_ITEM(kwnames, 0))) ||
        (nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "runtime") != 0)) {
        PyErr_SetString(PyExc_TypeError, "succeeded(job, runtime=None)");
        return NULL;
    }
    if (check_configured(s) < 0) return NULL;
    PyObject *job = args[0], *ident = NULL, *name = NULL, *runtime = NULL;
    double start;
    int r = -1;
    PyObject *key = PyLong_FromVoidPtr(job);
    if (key == NULL) return NULL;
    PyObject *entry = PyDict_GetItemWithError(s->started, key); /* borrowed */
    if (entry != NULL && PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == 3) {
        start = PyFloat_AsDouble(PyTuple_GET_ITEM(entry, 0));
        ident = Py_NewRef(PyTuple_GET_ITEM(entry, 1));
        name = Py_NewRef(PyTuple_GET_ITEM(entry, 2));
        if ((start == -1.0 && PyErr_Occurred()) || PyDict_DelItem(s->started, key) < 0) goto done;
    } else if (PyErr_Occurred()) {
        goto done;
    } else { /* never started here: read now, timed as 0 */
        if (entry != NULL && PyDict_DelItem(s->started, key) < 0) goto done;
        start = monotonic_now();
        if (job_identity(s, job, &ident, &name) < 0) goto done;
    }
    if (!PyUnicode_Check(ident) || !PyUnicode_Check(name)) {
        PyErr_SetString(PyExc_TypeError, "a started job's id and name must be str");
        goto done;
    }
    if (s->done.has_runtime) {
        runtime = run_time_text(s, monotonic_now() - start);
        if (runtime == NULL) goto done;
    }
    r = emit(s, &s->done, ident, name, runtime, 1);
done:
    Py_DECREF(key);
    Py_XDECREF(ident);
    Py_XDECREF(name);
    Py_XDECREF(runtime);
    if (r < 0) return NULL;
    Py_RETURN_NONE;
}

static int parse_template(PyObject *tuple, Py_ssize_t width, Template *t, const char *which) {
    Py_CLEAR(t->tuple);
    t->count = 0;
    t->has_runtime = 0;
    t->width = width;
    if (tuple == Py_None) return 0;
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) > MAX_PIECES) {
        PyErr_Format(PyExc_ValueError, "the %s template must be a tuple of at most %d pieces", which, MAX_PIECES);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        Piece *p = &t->pieces[i];
        if (PyBytes_Check(item)) {
            p->slot = -1;
            p->data = PyBytes_AS_STRING(item);
            p->len = PyBytes_GET_SIZE(item);
        } else if (PyLong_Check(item)) {
            long slot = PyLong_AsLong(item);
            if (slot < 0 || slot >= SLOT_COUNT) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_ValueError, "the %s template has an unknown slot %ld", which, slot);
                return -1;
            }
            p->slot = (int)slot;
            p->data = NULL;
            p->len = 0;
            t->has_runtime |= slot == SLOT_RUNTIME;
        } else {
            PyErr_Format(PyExc_TypeError, "the %s template holds bytes and int slots, not %.100s", which,
                         Py_TYPE(item)->tp_name);
            return -1;
        }
    }
    t->count = (int)PyTuple_GET_SIZE(tuple);
    t->tuple = Py_NewRef(tuple);
    return 0;
}

static PyObject *sink_configure(LineSink *s, PyObject *args) {
    PyObject *started, *start_tpl, *done_tpl, *run_time, *visible = Py_None, *date_fn = Py_None;
    Py_ssize_t max_started, start_width, done_width;
    if (!PyArg_ParseTuple(args, "O!nOnOnO|OO:configure", &PyDict_Type, &started, &max_started, &start_tpl,
                          &start_width, &done_tpl, &done_width, &run_time, &visible, &date_fn))
        return NULL;
    if ((visible != Py_None && !PyCallable_Check(visible)) || (date_fn != Py_None && !PyCallable_Check(date_fn))) {
        PyErr_SetString(PyExc_TypeError, "the escaper and the date formatter must be callable or None");
        return NULL;
    }
    if (max_started < 1) {
        PyErr_SetString(PyExc_ValueError, "max_started must be at least 1");
        return NULL;
    }
    if (done_tpl == Py_None || !PyCallable_Check(run_time)) {
        PyErr_SetString(PyExc_TypeError, "configure needs a success template and a run time formatter");
        return NULL;
    }
    if (parse_template(start_tpl, start_width, &s->start, "first line's") < 0 ||
        parse_template(done_tpl, done_width, &s->done, "success line's") < 0) {
        Py_CLEAR(s->started);
        return NULL;
    }
    Py_XSETREF(s->started, Py_NewRef(started));
    Py_XSETREF(s->run_time, Py_NewRef(run_time));
    Py_XSETREF(s->visible, visible == Py_None ? NULL : Py_NewRef(visible));
    Py_XSETREF(s->date_fn, date_fn == Py_None ? NULL : Py_NewRef(date_fn));
    s->date_len = 0; /* formatted again, by the new formatter */
    s->max_started = max_started;
    Py_RETURN_NONE;
}

/* -- the type ------------------------------------------------------------------------------------- */

static int sink_init(LineSink *s, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"fd", "stream", NULL};
    int fd;
    PyObject *stream = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|O:LineSink", kwlist, &fd, &stream)) return -1;
    if (fd < 0) {
        PyErr_SetString(PyExc_ValueError, "LineSink needs a file descriptor");
        return -1;
    }
    if (s->lock == NULL) {
        s->lock = PyThread_allocate_lock();
        if (s->lock == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    s->fd = fd;
    Py_XSETREF(s->stream, Py_NewRef(stream));
    s->pending = stream != Py_None;
    return 0;
}

static void sink_dealloc(LineSink *s) {
    Py_CLEAR(s->stream);
    Py_CLEAR(s->started);
    Py_CLEAR(s->run_time);
    Py_CLEAR(s->visible);
    Py_CLEAR(s->date_fn);
    Py_CLEAR(s->start.tuple);
    Py_CLEAR(s->done.tuple);
    PyMem_Free(s->buf);
    if (s->lock != NULL) PyThread_free_lock(s->lock);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyMethodDef sink_methods[] = {
    {"write", (PyCFunction)sink_write, METH_O, "write(text): write now, after anything held."},
    {"success", (PyCFunction)sink_success, METH_O, "success(text): hold on the holding thread, else write."},
    {"hold", (PyCFunction)sink_hold, METH_NOARGS, "hold(): this thread's success lines may wait."},
    {"release", (PyCFunction)sink_release, METH_NOARGS, "release(): stop holding, and write what is held."},
    {"flush", (PyCFunction)sink_flush, METH_NOARGS, "flush(): write what is held now."},
    {"configure", (PyCFunction)sink_configure, METH_VARARGS,
     "configure(started, max_started, start_template, start_width, done_template, done_width, run_time, "
     "visible=None, date=None)."},
    {"started", (PyCFunction)sink_started, METH_O, "started(job): record the job and write its first line."},
    {"succeeded", (PyCFunction)(void (*)(void))sink_succeeded, METH_FASTCALL | METH_KEYWORDS,
     "succeeded(job, runtime=None): the job's success line (held on the holding thread)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef sink_members[] = {
    {"writes", T_PYSSIZET, offsetof(LineSink, writes), READONLY, "write() calls made so far"},
    {"fd", T_INT, offsetof(LineSink, fd), READONLY, "the descriptor written to"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject LineSinkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "laraq._speedups.LineSink",
    .tp_doc = "The worker's console lines on a file descriptor (see laraq/cli/linesink.py).",
    .tp_basicsize = sizeof(LineSink),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)sink_init,
    .tp_dealloc = (destructor)sink_dealloc,
    .tp_methods = sink_methods,
    .tp_members = sink_members,
};

int laraq_add_line_sink(PyObject *module) {
    if ((str_id = PyUnicode_InternFromString("id")) == NULL ||
        (str_name = PyUnicode_InternFromString("name")) == NULL ||
        (str_flush = PyUnicode_InternFromString("flush")) == NULL ||
        (str_empty = PyUnicode_FromString("")) == NULL)
        return -1;
    if (PyType_Ready(&LineSinkType) < 0) return -1;
    Py_INCREF(&LineSinkType);
    if (PyModule_AddObject(module, "LineSink", (PyObject *)&LineSinkType) < 0) {
        Py_DECREF(&LineSinkType);
        return -1;
    }
    return 0;
}
