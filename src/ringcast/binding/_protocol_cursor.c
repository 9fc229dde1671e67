/* _protocol_cursor.c: the cursor types' object (the mapping, the core's layout and state) and
 * the interface functions the core calls that need no endpoint (pin, clock, signals, futex,
 * yield), part of the ringcast._protocol binding (included by _protocol.c). The upcalls an
 * endpoint answers (its observer's I/O and checks, its errors) are _protocol_endpoint.c's. */

/* A cursor: the writer's (_WriterSteps) or reader r's (_ReaderSteps). It holds the core's state of
 * its side (st: rc_writer / rc_reader, whose io is this cursor's) and, until an endpoint binds
 * its own, counters and a policy of its own. */
typedef struct {
    PyObject_HEAD
    PyObject *buf;      /* the segment's mmap object */
    Py_buffer view;     /* a buffer of it while pinned (pins > 0) */
    int pins;
    Py_ssize_t min_len; /* the mapping's bytes the layout reaches */
    rc_layout layout;
    size_t *offs;       /* layout.metas, .datas, .states: one allocation */
    union {
        rc_side s;
        rc_writer w;
        rc_reader r;
    } st;
    rc_iface io;
    rc_counters counters;
    rc_policy policy;
    uint8_t *live, *liveness; /* the writer's: n_reader bytes each */
    long *pids;               /* the writer's: each probed reader's pid */
    PyObject *ep;             /* the endpoint bound to this cursor (borrowed), or NULL */
    Py_ssize_t nparts;        /* the payload's parts in the call under way (RC_ERR_TOO_BIG's message) */
    /* a reader's */
    PyObject *side;     /* r as an int */
    PyObject *mv;       /* memoryview of the mapping: the copy's views are its slices */
    PyObject **slices;  /* chunk i's data slice */
} Cursor;

static PyTypeObject *WriterStepsType, *ReaderStepsType;

/* ------------------------------------------------------------ the interface: no endpoint -- */

static uint8_t *
cur_pin(void *ctx)
{
    Cursor *c = ctx;
    if (c->pins > 0) {
        c->pins++;
        return c->view.buf;
    }
    saved_exc e;
    put_aside(&e);
    int ok = 0;
    if (c->buf == NULL)
        PyErr_SetString(PyExc_RuntimeError, "this ring cursor was never initialised (or was cleared): build it from a ring");
    else if (PyObject_GetBuffer(c->buf, &c->view, PyBUF_WRITABLE) == 0) {
        if (c->view.len < c->min_len) {
            PyErr_Format(PyExc_ValueError, "the ring's mapping is %zd bytes, its layout needs %zd", c->view.len, c->min_len);
            PyBuffer_Release(&c->view);
        } else
            ok = 1;
    }
    take_back(&e, ok);
    if (!ok)
        return NULL;
    c->pins = 1;
    return c->view.buf;
}

static void
cur_unpin(void *ctx)
{
    Cursor *c = ctx;
    if (c->pins > 0 && --c->pins == 0)
        PyBuffer_Release(&c->view);
}

static double
mono_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* the clock a harness installed (ringcast.steps.set_clock: set_clock below), else the real one */
static double
cur_now(void *ctx)
{
    if (clock_monotonic == NULL)
        return mono_clock();
    saved_exc e;
    put_aside(&e);
    PyObject *v = PyObject_CallNoArgs(clock_monotonic);
    double now = v == NULL ? -1.0 : PyFloat_AsDouble(v);
    Py_XDECREF(v);
    if (now == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        now = mono_clock();
    }
    take_back(&e, 1);
    return now;
}

static int
cur_check_signals(void *ctx)
{
    return PyErr_CheckSignals() < 0 ? RC_ERR_RAISED : RC_OK;
}

static int
cur_futex_wait(void *ctx, uint32_t *word, uint32_t expected, double timeout)
{
    struct timespec ts;
    int rc, err;
    ts.tv_sec = (time_t)timeout;
    ts.tv_nsec = (long)((timeout - (double)ts.tv_sec) * 1e9);
    Py_BEGIN_ALLOW_THREADS
    rc = rc_futex_wait(word, expected, &ts);
    err = errno;
    Py_END_ALLOW_THREADS
    if (rc >= 0)
        return rc;
    errno = err;
    PyErr_SetFromErrno(PyExc_OSError);
    return RC_ERR_RAISED;
}

static int
cur_futex_wake(void *ctx, uint32_t *word)
{
    if (rc_futex_wake(word, 0x7FFFFFFF) >= 0)
        return RC_OK;
    saved_exc e;
    put_aside(&e);
    PyErr_SetFromErrno(PyExc_OSError);
    return take_back(&e, 0);
}

static void
cur_yield(void *ctx)
{
    Py_BEGIN_ALLOW_THREADS
    sched_yield();
    Py_END_ALLOW_THREADS
}

static int
cur_sleep(void *ctx, double seconds)
{
    PyObject *r = PyObject_CallFunction(clock_sleep, "d", seconds);
    Py_XDECREF(r);
    return r == NULL ? RC_ERR_RAISED : RC_OK;
}

/* the endpoint's answers (_protocol_endpoint.c), or an error without one */
static int ep_probe(void *ctx, int who, double waited);
static int ep_send_overflow(void *ctx);
static int ep_recv_overflow(void *ctx);
static int ep_copy_out(void *ctx, const uint8_t *data, size_t len);
static int ep_report(void *ctx, int event, double value);
static void ep_fail(PyObject *ep, rc_status code, double value);

static void
cur_fail(void *ctx, rc_status code, double value)
{
    Cursor *c = ctx;
    if (code == RC_ERR_CLOSED && PyErr_Occurred())
        return; /* the pin's error says it */
    if (c->ep != NULL) {
        ep_fail(c->ep, code, value);
        return;
    }
    saved_exc e;
    put_aside(&e);
    if (code == RC_ERR_TOO_BIG)
        PyErr_Format(PyExc_ValueError, "the payload's %zd parts are %zd bytes, more than the chunk's max_chunk_bytes=%zd",
                     c->nparts, (Py_ssize_t)value, (Py_ssize_t)c->layout.max_chunk_bytes);
    else if (code == RC_ERR_STATE)
        PyErr_Format(PyExc_IndexError, "reader out of range for n_reader=%u, or a step of the other side", c->layout.n_reader);
    else
        PyErr_Format(PyExc_RuntimeError, "ring cursor: error %d (this cursor has no endpoint)", (int)code);
    take_back(&e, 0);
}

/* ------------------------------------------------------------------------ construction -- */

static int
offsets(PyObject *seq, Py_ssize_t n, const char *what, size_t *out)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        PyErr_Format(PyExc_ValueError, "%s: %zd offsets, expected %zd", what, PySequence_Fast_GET_SIZE(fast), n);
        Py_DECREF(fast);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t v = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (v < 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "%s: offset %zd is negative", what, v);
            Py_DECREF(fast);
            return -1;
        }
        out[i] = (size_t)v;
    }
    Py_DECREF(fast);
    return 0;
}

static void
grow(Py_ssize_t *min_len, size_t end)
{
    if ((Py_ssize_t)end > *min_len)
        *min_len = (Py_ssize_t)end;
}

/* Cursor(buf, metas, datas, states, max_chunk_bytes, words): the offsets come from ringcast.layout;
 * words: (write_seq, reader_waiters, read_seq, writer_waiters). */
static int
cursor_init(Cursor *c, PyObject *args)
{
    PyObject *buf, *metas, *datas, *states, *words;
    Py_ssize_t mcb;
    if (!PyArg_ParseTuple(args, "OOOOnO", &buf, &metas, &datas, &states, &mcb, &words))
        return -1;
    if (c->offs != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a ring cursor is initialised once");
        return -1;
    }
    Py_ssize_t max_chunks = PySequence_Size(metas), n_reader = PySequence_Size(states);
    if (max_chunks < 0 || n_reader < 0)
        return -1;
    if (max_chunks < 1 || n_reader < 1 || mcb < 1) {
        PyErr_Format(PyExc_ValueError, "a ring has >= 1 chunk, >= 1 reader and >= 1 byte per chunk, got %zd, %zd, %zd",
                     max_chunks, n_reader, mcb);
        return -1;
    }
    size_t w[4];
    c->offs = PyMem_Calloc(2 * max_chunks + n_reader, sizeof(size_t));
    c->live = PyMem_Calloc(2 * n_reader, 1);
    c->pids = PyMem_Calloc(n_reader, sizeof(long));
    if (c->offs == NULL || c->live == NULL || c->pids == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->liveness = c->live + n_reader;
    if (offsets(metas, max_chunks, "metas", c->offs) < 0 || offsets(datas, max_chunks, "datas", c->offs + max_chunks) < 0
        || offsets(states, n_reader, "states", c->offs + 2 * max_chunks) < 0 || offsets(words, 4, "words", w) < 0)
        return -1;
    rc_layout *L = &c->layout;
    *L = (rc_layout){(uint32_t)n_reader, (uint32_t)max_chunks, (size_t)mcb, c->offs, c->offs + max_chunks,
                     c->offs + 2 * max_chunks, w[0], w[1], w[2], w[3]};
    c->min_len = 0;
    for (Py_ssize_t i = 0; i < max_chunks; i++) {
        grow(&c->min_len, L->metas[i] + 1 + n_reader);
        grow(&c->min_len, L->datas[i] + mcb);
    }
    for (Py_ssize_t r = 0; r < n_reader; r++)
        grow(&c->min_len, L->states[r] + 4);
    for (int k = 0; k < 4; k++) {
        if (w[k] % 4 != 0) {
            PyErr_Format(PyExc_ValueError, "words: offset %zu is not 4-byte aligned", w[k]);
            return -1;
        }
        grow(&c->min_len, w[k] + 4);
    }
    c->io = (rc_iface){c, cur_pin, cur_unpin, cur_now, cur_check_signals, cur_futex_wait, cur_futex_wake, cur_yield,
                       cur_sleep, ep_probe, ep_send_overflow, ep_recv_overflow, ep_copy_out, ep_report, cur_fail};
    c->policy = (rc_policy){0.0, 0.1, 0, 1};
    Py_INCREF(buf);
    c->buf = buf;
    if (cur_pin(c) == NULL)
        return -1;
    cur_unpin(c);
    return 0;
}

static int
cursor_traverse(Cursor *c, visitproc visit, void *arg)
{
    Py_VISIT(c->buf);
    Py_VISIT(c->mv);
    Py_VISIT(Py_TYPE(c));
    return 0;
}

static int
cursor_tp_clear(Cursor *c)
{
    while (c->pins > 0)
        cur_unpin(c);
    Py_CLEAR(c->mv);
    Py_CLEAR(c->buf);
    return 0;
}

static void
cursor_dealloc(Cursor *c)
{
    PyTypeObject *tp = Py_TYPE(c);
    PyObject_GC_UnTrack(c);
    cursor_tp_clear(c);
    if (c->slices != NULL)
        for (uint32_t i = 0; i < c->layout.max_chunks; i++)
            Py_XDECREF(c->slices[i]);
    PyMem_Free(c->slices);
    Py_CLEAR(c->side);
    PyMem_Free(c->offs);
    PyMem_Free(c->live);
    PyMem_Free(c->pids);
    tp->tp_free((PyObject *)c);
    Py_DECREF(tp);
}

static PyObject *
cursor_get_index(Cursor *c, void *closure)
{
    return PyLong_FromSize_t(c->st.s.index);
}

/* Moving a cursor is not a step: only WriterPublish / ReaderAck do it, and tests. */
static int
cursor_set_index(Cursor *c, PyObject *value, void *closure)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a cursor's index cannot be deleted");
        return -1;
    }
    Py_ssize_t i = PyLong_AsSsize_t(value);
    if (i == -1 && PyErr_Occurred())
        return -1;
    if (i < 0 || i >= (Py_ssize_t)c->layout.max_chunks) {
        PyErr_Format(PyExc_IndexError, "chunk index %zd out of range for max_chunks=%u", i, c->layout.max_chunks);
        return -1;
    }
    c->st.s.index = (size_t)i;
    return 0;
}
