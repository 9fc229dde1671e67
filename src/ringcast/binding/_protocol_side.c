/* _protocol_side.c: what every CPython object over one side of the protocol core holds: the
 * mapping (pinned per call), the core's layout and state of the side (rc_writer / rc_reader), its
 * interface (rc_iface) and the interface functions that need no observer (pin, the clock,
 * signals, futex, yield). Part of the ringcast._protocol binding (included by _protocol.c: the
 * endpoints start with a Side), and included by the lab's test extension (ringcast_lab._steps,
 * src/ringcast_lab/steps/), whose single-step objects are Sides too: one source for both.
 *
 * The includer defines current_hook() (a new reference to the Python step hook, or NULL) before
 * it includes this file: the hook trampoline below calls it. */

/* ----------------------------------------------------------------------------- helpers -- */

/* The exception being handled is (et, ev, tb), fetched; if another is now set, it becomes that
 * one's __context__ (Python's "during handling of the above exception, another occurred"), else
 * it is restored. */
static void
rethrow(PyObject *et, PyObject *ev, PyObject *tb)
{
    if (!PyErr_Occurred()) {
        PyErr_Restore(et, ev, tb);
        return;
    }
    if (et == NULL)
        return;
    PyObject *nt, *nv, *ntb;
    PyErr_Fetch(&nt, &nv, &ntb);
    PyErr_NormalizeException(&nt, &nv, &ntb);
    PyErr_NormalizeException(&et, &ev, &tb);
    if (tb != NULL)
        PyException_SetTraceback(ev, tb);
    if (nv != NULL && ev != NULL && nv != ev)
        PyException_SetContext(nv, ev); /* steals ev */
    else
        Py_XDECREF(ev);
    Py_XDECREF(et);
    Py_XDECREF(tb);
    PyErr_Restore(nt, nv, ntb);
}

/* An upcall may run while the core unwinds from an earlier error (an exception pending): it
 * runs with that exception put aside, and a new one gets it as its __context__. */
typedef struct {
    PyObject *t, *v, *tb;
} saved_exc;

static inline void
put_aside(saved_exc *e)
{
    PyErr_Fetch(&e->t, &e->v, &e->tb);
}

static inline int
take_back(saved_exc *e, int ok)
{
    rethrow(e->t, e->v, e->tb);
    return ok ? RC_OK : RC_ERR_RAISED;
}

/* ------------------------------------------------------------------------ the step hook -- */

/* Interned "WriterClaim", ... and "writer": process-wide, as rc_step_hook is (it has no context
 * to find a module's state by), set by hook_names_init at module init */
static PyObject *action_names[RC_N_ACTIONS], *s_writer;
static PyObject *current_hook(void);

static int
hook_names_init(void)
{
    for (int a = 0; a < RC_N_ACTIONS; a++)
        if (action_names[a] == NULL && (action_names[a] = PyUnicode_InternFromString(rc_action_names[a])) == NULL)
            return -1;
    return s_writer != NULL || (s_writer = PyUnicode_InternFromString("writer")) != NULL ? 0 : -1;
}

/* rc_step_hook while a Python hook is set: hook(action, side, index, reader) */
static int
hook_trampoline(rc_action action, int side, size_t index, int reader)
{
    saved_exc e;
    put_aside(&e);
    PyObject *h = current_hook(), *res = NULL; /* a new reference: the hook may replace itself */
    if (h == NULL)
        return take_back(&e, !PyErr_Occurred()) == RC_OK ? 0 : -1;
    PyObject *sd = side == RC_WRITER ? Py_NewRef(s_writer) : PyLong_FromLong(side), *idx = PyLong_FromSize_t(index);
    PyObject *rd = reader == RC_NO_READER ? Py_NewRef(Py_None) : PyLong_FromLong(reader);
    if (sd != NULL && idx != NULL && rd != NULL) {
        PyObject *args[4] = {action_names[action], sd, idx, rd};
        res = PyObject_Vectorcall(h, args, 4, NULL);
    }
    Py_XDECREF(sd);
    Py_XDECREF(idx);
    Py_XDECREF(rd);
    Py_DECREF(h);
    Py_XDECREF(res);
    return take_back(&e, res != NULL) == RC_OK ? 0 : -1;
}

/* ---------------------------------------------------------------------------- the side -- */

typedef struct {
    PyObject_HEAD
    PyObject *buf;      /* the segment's mmap object (NULL: never built, or cleared) */
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
    rc_counters counters;      /* the side's own, until an endpoint binds a queue's Counters */
    rc_policy policy;
    uint8_t *live, *liveness;  /* the writer's: n_reader bytes each */
    PyObject *clock_monotonic, *clock_sleep; /* a harness's clock, copied when built; NULL: the real one */
    Py_ssize_t nparts;         /* the payload's parts in the call under way (RC_ERR_TOO_BIG's message) */
    PyObject *mv, **slices;    /* a reader's: a memoryview of the mapping, chunk i's data slice */
} Side;

static uint8_t *
side_pin(void *ctx)
{
    Side *c = ctx;
    if (c->pins > 0) {
        c->pins++;
        return c->view.buf;
    }
    saved_exc e;
    put_aside(&e);
    int ok = 0;
    if (c->buf == NULL)
        PyErr_SetString(PyExc_RuntimeError, "this ring side was never initialised (or was cleared): build it from a ring");
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
side_unpin(void *ctx)
{
    Side *c = ctx;
    if (c->pins > 0 && --c->pins == 0)
        PyBuffer_Release(&c->view);
}

/* The clock (io->now, io->sleep): the real one, or a harness's (ringcast.steps.set_clock),
 * chosen when the side is built */
static double
real_now(void *ctx)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int
real_sleep(void *ctx, double seconds)
{
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    Py_BEGIN_ALLOW_THREADS
    nanosleep(&ts, NULL); /* a signal ends it early: the wait looks again */
    Py_END_ALLOW_THREADS
    return PyErr_CheckSignals() < 0 ? RC_ERR_RAISED : RC_OK;
}

static inline double
harness_now(void *ctx)
{
    saved_exc e;
    put_aside(&e);
    PyObject *v = PyObject_CallNoArgs(((Side *)ctx)->clock_monotonic);
    double now = v == NULL ? -1.0 : PyFloat_AsDouble(v);
    Py_XDECREF(v);
    if (now == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        now = real_now(ctx);
    }
    take_back(&e, 1);
    return now;
}

static inline int
harness_sleep(void *ctx, double seconds)
{
    PyObject *s = PyFloat_FromDouble(seconds), *r = s == NULL ? NULL : PyObject_CallOneArg(((Side *)ctx)->clock_sleep, s);
    Py_XDECREF(s);
    Py_XDECREF(r);
    return r == NULL ? RC_ERR_RAISED : RC_OK;
}

static int
side_check_signals(void *ctx)
{
    return PyErr_CheckSignals() < 0 ? RC_ERR_RAISED : RC_OK;
}

static int
side_futex_wait(void *ctx, uint32_t *word, uint32_t expected, double timeout)
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
side_futex_wake(void *ctx, uint32_t *word)
{
    if (rc_futex_wake(word, 0x7FFFFFFF) >= 0)
        return RC_OK;
    saved_exc e;
    put_aside(&e);
    PyErr_SetFromErrno(PyExc_OSError);
    return take_back(&e, 0);
}

static void
side_yield(void *ctx)
{
    Py_BEGIN_ALLOW_THREADS
    sched_yield();
    Py_END_ALLOW_THREADS
}

/* ------------------------------------------------------------------------ construction -- */

static int
offsets(PyObject *seq, Py_ssize_t n, const char *what, size_t *out)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL)
        return -1;
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        PyErr_Format(PyExc_ValueError, "%s: %zd offsets, expected %zd", what, PySequence_Fast_GET_SIZE(fast), n);
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        Py_ssize_t v = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (v < 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "%s: offset %zd is negative", what, v);
            rc = -1;
        }
        out[i] = (size_t)v;
    }
    Py_DECREF(fast);
    return rc;
}

static void
grow(Py_ssize_t *min_len, size_t end)
{
    if ((Py_ssize_t)end > *min_len)
        *min_len = (Py_ssize_t)end;
}

/* The side of a ring over `where` = ShmRingBuffer.offsets(): (buf, metas, datas, states,
 * max_chunk_bytes, words (write_seq, reader_waiters, read_seq, writer_waiters, reader_pollers,
 * writer_pollers, writer_poll), polls); r: the reader, or RC_WRITER. Its interface (c->io) is the caller's, filled before. */
static int
side_build(Side *c, PyObject *where, long r)
{
    PyObject *buf, *metas, *datas, *states, *words, *polls;
    Py_ssize_t mcb;
    if (!PyArg_ParseTuple(where, "OOOOnOO:ring offsets", &buf, &metas, &datas, &states, &mcb, &words, &polls))
        return -1;
    if (c->offs != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a ring side is built once");
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
    if (r != RC_WRITER && (r < 0 || r >= n_reader)) {
        PyErr_Format(PyExc_IndexError, "reader %ld out of range for n_reader=%zd", r, n_reader);
        return -1;
    }
    size_t w[7];
    c->offs = PyMem_Calloc(2 * max_chunks + 2 * n_reader, sizeof(size_t));
    c->live = PyMem_Calloc(2 * n_reader, 1);
    if (c->offs == NULL || c->live == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->liveness = c->live + n_reader;
    if (offsets(metas, max_chunks, "metas", c->offs) < 0 || offsets(datas, max_chunks, "datas", c->offs + max_chunks) < 0
        || offsets(states, n_reader, "states", c->offs + 2 * max_chunks) < 0 || offsets(words, 7, "words", w) < 0
        || offsets(polls, n_reader, "polls", c->offs + 2 * max_chunks + n_reader) < 0)
        return -1;
    rc_layout *L = &c->layout;
    *L = (rc_layout){.n_reader = (uint32_t)n_reader, .max_chunks = (uint32_t)max_chunks, .max_chunk_bytes = (size_t)mcb,
                     .metas = c->offs, .datas = c->offs + max_chunks, .states = c->offs + 2 * max_chunks,
                     .write_seq = w[0], .reader_waiters = w[1], .read_seq = w[2], .writer_waiters = w[3],
                     .reader_pollers = w[4], .writer_pollers = w[5], .writer_poll = w[6],
                     .polls = c->offs + 2 * max_chunks + n_reader};
    for (Py_ssize_t i = 0; i < max_chunks; i++) {
        grow(&c->min_len, L->metas[i] + 1 + n_reader);
        grow(&c->min_len, L->datas[i] + mcb);
    }
    for (Py_ssize_t q = 0; q < n_reader; q++) {
        grow(&c->min_len, L->states[q] + 4);
        grow(&c->min_len, L->polls[q] + 4);
        if (L->polls[q] % 4 != 0) {
            PyErr_Format(PyExc_ValueError, "polls: offset %zu is not 4-byte aligned", L->polls[q]);
            return -1;
        }
    }
    for (int k = 0; k < 7; k++) {
        if (w[k] % 4 != 0) {
            PyErr_Format(PyExc_ValueError, "words: offset %zu is not 4-byte aligned", w[k]);
            return -1;
        }
        grow(&c->min_len, w[k] + 4);
    }
    c->policy = (rc_policy){.spin = 0.0, .recheck_interval = 0.1, .tight_looks = 0, .use_futex = 1, .spin_max = 0.0};
    c->buf = Py_NewRef(buf);
    if (side_pin(c) == NULL)
        return -1;
    side_unpin(c);
    if (r == RC_WRITER) {
        rc_writer_init(&c->st.w, L, &c->io, &c->policy, &c->counters, NULL, c->live, c->liveness);
        return 0;
    }
    rc_reader_init(&c->st.r, (uint32_t)r, L, &c->io, &c->policy, &c->counters, NULL);
    if ((c->mv = PyMemoryView_FromObject(c->buf)) == NULL)
        return -1;
    if ((c->slices = PyMem_Calloc(L->max_chunks, sizeof(PyObject *))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t i = 0; i < L->max_chunks; i++) {
        PyObject *lo = PyLong_FromSize_t(L->datas[i]), *hi = PyLong_FromSize_t(L->datas[i] + L->max_chunk_bytes);
        c->slices[i] = (lo && hi) ? PySlice_New(lo, hi, NULL) : NULL;
        Py_XDECREF(lo);
        Py_XDECREF(hi);
        if (c->slices[i] == NULL)
            return -1;
    }
    return 0;
}

/* The chunk at the side's index as a slice of a reader's view of the mapping (ReaderCopy's view) */
static PyObject *
chunk_view(Side *c)
{
    if (c->slices == NULL || c->mv == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this ring side was never initialised (or was cleared): build it from a ring");
        return NULL;
    }
    return PyObject_GetItem(c->mv, c->slices[c->st.s.index]);
}

static int
side_traverse(Side *c, visitproc visit, void *arg)
{
    Py_VISIT(c->buf);
    Py_VISIT(c->mv);
    Py_VISIT(c->clock_monotonic);
    Py_VISIT(c->clock_sleep);
    Py_VISIT(Py_TYPE(c));
    return 0;
}

static int
side_clear(Side *c)
{
    while (c->pins > 0)
        side_unpin(c);
    Py_CLEAR(c->mv);
    Py_CLEAR(c->buf);
    Py_CLEAR(c->clock_monotonic);
    Py_CLEAR(c->clock_sleep);
    return 0;
}

/* What side_clear leaves: the arrays (the core's state points into them until the object goes) */
static void
side_free(Side *c)
{
    side_clear(c);
    if (c->slices != NULL)
        for (uint32_t i = 0; i < c->layout.max_chunks; i++)
            Py_XDECREF(c->slices[i]);
    PyMem_Free(c->slices);
    PyMem_Free(c->offs);
    PyMem_Free(c->live);
}

/* ------------------------------------------------------------------------- the payload -- */

/* A payload's parts as the core's rc_parts (buffers held until parts_release) */
typedef struct {
    PyObject *fast;
    Py_ssize_t n, got;
    Py_buffer stack[8], *pv;
    const void *bstack[8], **bufs;
    size_t lstack[8], *lens;
    rc_parts parts;
} Parts;

static void
parts_release(Parts *p)
{
    for (Py_ssize_t j = 0; j < p->got; j++)
        PyBuffer_Release(&p->pv[j]);
    if (p->pv != p->stack) {
        PyMem_Free(p->pv);
        PyMem_Free(p->bufs);
        PyMem_Free(p->lens);
    }
    Py_CLEAR(p->fast);
}

static int
parts_get(Parts *p, PyObject *seq)
{
    p->got = 0;
    p->pv = p->stack;
    p->bufs = p->bstack;
    p->lens = p->lstack;
    if ((p->fast = PySequence_Fast(seq, "the payload's parts must be a sequence of bytes-like objects")) == NULL)
        return -1;
    p->n = PySequence_Fast_GET_SIZE(p->fast);
    if (p->n > 8) {
        p->pv = PyMem_Calloc(p->n, sizeof(Py_buffer));
        p->bufs = PyMem_Calloc(p->n, sizeof(void *));
        p->lens = PyMem_Calloc(p->n, sizeof(size_t));
        if (p->pv == NULL || p->bufs == NULL || p->lens == NULL) {
            PyErr_NoMemory();
            parts_release(p);
            return -1;
        }
    }
    for (; p->got < p->n; p->got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(p->fast, p->got), &p->pv[p->got], PyBUF_SIMPLE) < 0) {
            parts_release(p);
            return -1;
        }
        p->bufs[p->got] = p->pv[p->got].buf;
        p->lens[p->got] = (size_t)p->pv[p->got].len;
    }
    p->parts = (rc_parts){.n = (size_t)p->n, .bufs = p->bufs, .lens = p->lens};
    return 0;
}

/* RC_ERR_TOO_BIG's message (value: the payload's bytes) */
static void
too_big(Side *c, double value)
{
    PyErr_Format(PyExc_ValueError, "the payload's %zd parts are %zd bytes, more than the chunk's max_chunk_bytes=%zd",
                 c->nparts, (Py_ssize_t)value, (Py_ssize_t)c->layout.max_chunk_bytes);
}
