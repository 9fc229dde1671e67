/* _protocol_endpoint.c: the endpoint types (ringcast.endpoint's WriterEndpoint and ReaderEndpoint
 * subclass them), part of the ringcast._protocol binding (included by _protocol.c).
 *
 * An endpoint is the one object of its side: a Side (_protocol_side.c: the mapping, the core's
 * rc_writer / rc_reader, its interface) and what the interface's upcalls answer with. Each entry
 * point (_protocol_sides.c) converts its arguments, keeps the call's Python objects where the
 * upcalls find them, and calls one entry point of the core (rc_writer_publish, rc_reader_receive,
 * ...), which runs the whole sequence, its waits and its failure paths. The upcalls answer what
 * the core asks (ep_*: the observer's overflow I/O, liveness and logs, copy_out, the errors),
 * each with what it calls resolved once, at _bind. No upcall decides anything: the core decides,
 * the binding reports. */

typedef struct {
    Side c;             /* first: the core's ctx is the endpoint, and a Side */
    PyObject *counters; /* a Counters: the core's rc_counters */
    PyObject *cancel;   /* a Cancel: the core's rc_cancel */
    long *pids;         /* the writer's: each probed reader's pid */
    struct bell *bells; /* the descriptor wait: the other side's pollers' pipes, opened (ep_signal) */
    /* resolved at _bind: the observer's methods, the ring's liveness, the endpoint's errors */
    PyObject *m_send, *m_recv, *m_timeout_error, *m_check_writer, *m_dead_error, *m_evicted, *m_long_wait, *m_unreachable;
    PyObject *m_liveness, *m_evicted_error, *wait_label, *cancelled, *overflow_marker, *mv_release;
    /* one call's objects, for the upcalls */
    PyObject *frames_out, *unpublished, *copy_out, *kept, *frames_in, *deadline, *timeout;
    int zero_copy;
} Endpoint;

#define EP_REFS(ep)                                                                                                      \
    &ep->counters, &ep->cancel, &ep->m_send, &ep->m_recv, &ep->m_timeout_error, &ep->m_check_writer, &ep->m_dead_error, \
        &ep->m_evicted, &ep->m_long_wait, &ep->m_unreachable, &ep->m_liveness, &ep->m_evicted_error, &ep->wait_label, &ep->cancelled,             \
        &ep->overflow_marker, &ep->mv_release, &ep->frames_out, &ep->unpublished, &ep->copy_out, &ep->kept,             \
        &ep->frames_in, &ep->deadline, &ep->timeout

/* a call of an upcall's Python method: the core's code for its result */
static int
called(PyObject *r)
{
    Py_XDECREF(r);
    return r == NULL ? RC_ERR_RAISED : RC_OK;
}

/* [(r, pid)] of the readers whose liveness (the writer's last idle check) is `which` */
static PyObject *
readers_with(Endpoint *ep, int which)
{
    PyObject *out = PyList_New(0);
    for (uint32_t r = 0; out != NULL && r < ep->c.layout.n_reader; r++) {
        if (ep->c.liveness[r] != which)
            continue;
        PyObject *t = Py_BuildValue("(Il)", r, ep->pids[r]);
        if (t == NULL || PyList_Append(out, t) < 0)
            Py_CLEAR(out);
        Py_XDECREF(t);
    }
    return out;
}

/* ------------------------------------------------------------------------------ upcalls -- */

static int
ep_probe(void *ctx, int who, double waited)
{
    Endpoint *ep = ctx;
    saved_exc e;
    put_aside(&e);
    int v = RC_ALIVE;
    if (who == RC_WRITER) /* the observer raises for a dead writer */
        v = called(PyObject_CallFunction(ep->m_check_writer, "Od", (PyObject *)ep, waited));
    else {
        PyObject *res = PyObject_CallFunction(ep->m_liveness, "[i]", who), *dead, *unknown;
        if (res == NULL || !PyArg_ParseTuple(res, "OO", &dead, &unknown) || !PyList_Check(dead) || !PyList_Check(unknown))
            v = RC_ERR_RAISED;
        else {
            PyObject *hit = PyList_GET_SIZE(dead) ? PyList_GET_ITEM(dead, 0) : PyList_GET_SIZE(unknown) ? PyList_GET_ITEM(unknown, 0) : NULL;
            v = PyList_GET_SIZE(dead) ? RC_DEAD : PyList_GET_SIZE(unknown) ? RC_UNKNOWN : RC_ALIVE;
            if (hit != NULL && PyTuple_Check(hit) && PyTuple_GET_SIZE(hit) == 2)
                ep->pids[who] = PyLong_AsLong(PyTuple_GET_ITEM(hit, 1));
            if (PyErr_Occurred())
                v = RC_ERR_RAISED;
        }
        Py_XDECREF(res);
    }
    return take_back(&e, v >= 0) == RC_OK ? v : RC_ERR_RAISED;
}

static int
ep_send_overflow(void *ctx)
{
    Endpoint *ep = ctx;
    saved_exc e;
    put_aside(&e);
    return take_back(&e, called(PyObject_CallOneArg(ep->m_send, ep->frames_out)) == RC_OK);
}

/* the payload arrives into frames_in with no Python code between its return and the core's
 * owed_payload := 0 */
static int
ep_recv_overflow(void *ctx)
{
    Endpoint *ep = ctx;
    saved_exc e;
    put_aside(&e);
    PyObject *args[2] = {ep->deadline ? ep->deadline : Py_None, ep->timeout ? ep->timeout : Py_None};
    PyObject *frames = PyObject_Vectorcall(ep->m_recv, args, 2, NULL);
    Py_XSETREF(ep->frames_in, frames);
    return take_back(&e, frames != NULL);
}

/* ReaderCopy's copy: copy_out(view) on the chunk's view, released on the way out (as `with view:`) */
static int
ep_copy_out(void *ctx, const uint8_t *data, size_t len)
{
    Endpoint *ep = ctx;
    saved_exc e;
    put_aside(&e);
    PyObject *view = chunk_view(&ep->c), *kept = NULL;
    if (view != NULL) {
        kept = PyObject_CallOneArg(ep->copy_out, view);
        if (Py_REFCNT(view) > 1) { /* somebody kept it: release it, as `with view:` does */
            saved_exc e2;
            put_aside(&e2);
            PyObject *r = PyObject_CallOneArg(ep->mv_release, view);
            if (r == NULL)
                Py_CLEAR(kept);
            Py_XDECREF(r);
            take_back(&e2, 1);
        }
        Py_DECREF(view);
    }
    int kind = kept == ep->overflow_marker ? RC_MARKER : RC_COPIED;
    if (kind == RC_MARKER)
        Py_CLEAR(kept);
    Py_XSETREF(ep->kept, kept);
    return take_back(&e, kept != NULL || kind == RC_MARKER) == RC_OK ? kind : RC_ERR_RAISED;
}

static int
ep_report(void *ctx, int event, double value)
{
    Endpoint *ep = ctx;
    if (event == RC_REPORT_DROPPED && (ep->unpublished == NULL || ep->unpublished == Py_None))
        return RC_OK;
    saved_exc e;
    put_aside(&e);
    PyObject *r = NULL, *lst = NULL;
    if (event == RC_REPORT_DROPPED)
        r = PyObject_CallNoArgs(ep->unpublished);
    else if (event == RC_REPORT_EVICTED && (lst = readers_with(ep, RC_DEAD)) != NULL)
        r = PyObject_CallFunction(ep->m_evicted, "OO", (PyObject *)ep, lst);
    else if (event == RC_REPORT_LONG_WAIT
             && (lst = ep->c.st.s.side == RC_WRITER ? readers_with(ep, RC_UNKNOWN) : PyList_New(0)) != NULL)
        r = PyObject_CallFunction(ep->m_long_wait, "OdO", (PyObject *)ep, value, lst);
    Py_XDECREF(lst);
    return take_back(&e, called(r) == RC_OK);
}

/* NotifySignal's I/O: one byte into poller `who`'s wake pipe (ringcast.pollers). Its poll slot
 * names the pipe's write end in the poller's process, the pipe's inode and the poller's pid; the
 * pipe is opened once, through /proc/<pid>/fd/<fd> (the kernel allows that to the poller's own
 * user only), checked by its inode (a recycled pid or descriptor number is refused) and kept
 * (ep->bells[who], the writer's at n_reader). One that cannot be reached (the poller exited or
 * closed its descriptor) goes to the observer's poller_unreachable, which logs it. */
struct bell {
    uint32_t pid;
    int32_t fd;
    uint64_t ino;
    int ours; /* -1: not open */
};

static int
unreachable(Endpoint *ep, int who, int err)
{
    saved_exc e;
    put_aside(&e);
    return take_back(&e, called(PyObject_CallFunction(ep->m_unreachable, "Oii", (PyObject *)ep, who, err)) == RC_OK);
}

static int
ep_signal(void *ctx, int who)
{
    Endpoint *ep = ctx;
    uint8_t *base = side_pin(&ep->c); /* nested in the notify's pin: cannot fail */
    if (base == NULL)
        return RC_ERR_RAISED;
    const uint8_t *slot = base + (who == RC_WRITER ? ep->c.layout.writer_poll : ep->c.layout.polls[who]);
    struct bell now = {.ours = -1}, *b = &ep->bells[who == RC_WRITER ? ep->c.layout.n_reader : (uint32_t)who];
    memcpy(&now.fd, slot + 4, 4);
    memcpy(&now.ino, slot + 8, 8);
    memcpy(&now.pid, slot + 16, 4);
    side_unpin(&ep->c);
    if (b->ours < 0 || b->pid != now.pid || b->fd != now.fd || b->ino != now.ino) {
        if (b->ours >= 0)
            close(b->ours);
        char path[64];
        snprintf(path, sizeof path, "/proc/%u/fd/%d", (unsigned)now.pid, (int)now.fd);
        struct stat st;
        now.ours = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (now.ours >= 0 && (fstat(now.ours, &st) < 0 || !S_ISFIFO(st.st_mode) || (uint64_t)st.st_ino != now.ino)) {
            close(now.ours);
            now.ours = -1;
            errno = ESTALE;
        }
        *b = now;
        if (now.ours < 0)
            return unreachable(ep, who, errno);
    }
    if (write(b->ours, "\1", 1) < 0 && errno != EAGAIN) { /* EAGAIN: full, readable already */
        int err = errno;
        close(b->ours);
        b->ours = -1;
        return unreachable(ep, who, err);
    }
    return RC_OK;
}

/* The core's errors as the project's exceptions (chained to one being handled) */
static void
ep_fail(void *ctx, rc_status code, double value)
{
    Endpoint *ep = ctx;
    PyObject *self = ctx;
    if (code == RC_ERR_CLOSED && PyErr_Occurred())
        return; /* the pin's error says it */
    saved_exc e;
    put_aside(&e);
    PyObject *exc = NULL, *lst = NULL, *msg = NULL;
    switch (code) {
    case RC_ERR_TIMEOUT:
        exc = PyObject_CallFunction(ep->m_timeout_error, "Od", self, value);
        break;
    case RC_ERR_CANCELLED:
        if ((msg = PyUnicode_FromFormat("%S: shutdown() was called while waiting", ep->wait_label)) != NULL)
            exc = PyObject_CallOneArg(ep->cancelled, msg);
        break;
    case RC_ERR_DEAD_READERS:
        if ((lst = readers_with(ep, RC_DEAD)) != NULL)
            exc = PyObject_CallFunction(ep->m_dead_error, "OOd", self, lst, value);
        break;
    case RC_ERR_EVICTED: /* value 1: a copy was dropped; 0: found evicted while it waited */
        exc = PyObject_CallFunction(ep->m_evicted_error, "Os", self, value == 0.0 ? NULL
                                    : ep->zero_copy ? "what the block made of its bytes must be discarded" : "the copy is dropped");
        break;
    case RC_ERR_TOO_BIG:
        too_big(&ep->c, value);
        break;
    case RC_ERR_CLOSED:
        PyErr_SetString(PyExc_ValueError, "the ring is closed");
        break;
    default:
        PyErr_Format(PyExc_RuntimeError, "%R: the protocol core refused the call (error %d): acquire and commit/release "
                     "alternate, and an evicted reader receives nothing more", self, (int)code);
    }
    Py_XDECREF(lst);
    Py_XDECREF(msg);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    take_back(&e, 0);
}

/* ---------------------------------------------------------------------------- binding -- */

static Endpoint *
bound(Endpoint *ep)
{
    if (ep->c.offs == NULL || ep->m_send == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this endpoint is not bound: build it from a ring (its __init__ calls _bind)");
        return NULL;
    }
    return ep;
}

/* _bind(offsets, r, liveness, observer, counters, cancel, policy, evict_dead_readers): build the
 * side over the ring (offsets: ShmRingBuffer.offsets(); r: the reader, or -1 for the writer) and
 * fill the core's interface, once. Every name is looked up here, none per message or per wait. */
static PyObject *
ep_bind(Endpoint *ep, PyObject *args)
{
    PyObject *where, *liveness, *obs, *counters, *cancel, *policy;
    long r;
    int evict;
    proto_state *st = state();
    if (st == NULL || !PyArg_ParseTuple(args, "OlOOO!O!Op:_bind", &where, &r, &liveness, &obs, st->counters_type, &counters,
                                        st->cancel_type, &cancel, &policy, &evict))
        return NULL;
    int writer = PyObject_TypeCheck(ep, st->wep_type);
    if (writer != (r == RC_WRITER)) {
        PyErr_Format(PyExc_ValueError, "_bind: r=%ld for a %s endpoint", r, writer ? "writer" : "reader");
        return NULL;
    }
    PyObject *spin = PyObject_GetAttrString(policy, "spin"), *re = PyObject_GetAttrString(policy, "recheck_interval");
    PyObject *tl = PyObject_GetAttrString(policy, "tight_looks"), *fx = PyObject_GetAttrString(policy, "futex");
    PyObject *sm = PyObject_GetAttrString(policy, "spin_max");
    double sp = spin ? PyFloat_AsDouble(spin) : -1, rv = re ? PyFloat_AsDouble(re) : -1, smax = sm ? PyFloat_AsDouble(sm) : -1;
    long t = tl ? PyLong_AsLong(tl) : -1;
    int futex = fx ? PyObject_IsTrue(fx) : -1;
    Py_XDECREF(spin);
    Py_XDECREF(re);
    Py_XDECREF(tl);
    Py_XDECREF(fx);
    Py_XDECREF(sm);
    if (PyErr_Occurred())
        return NULL;
    Side *c = &ep->c;
    c->clock_monotonic = Py_XNewRef(st->clock_monotonic); /* the clock installed now, for this endpoint's life */
    c->clock_sleep = Py_XNewRef(st->clock_sleep);
    c->io = (rc_iface){.ctx = ep, .pin = side_pin, .unpin = side_unpin, .now = c->clock_monotonic ? harness_now : real_now,
                       .check_signals = side_check_signals, .futex_wait = side_futex_wait, .futex_wake = side_futex_wake,
                       .yield = side_yield, .sleep = c->clock_sleep ? harness_sleep : real_sleep, .probe = ep_probe,
                       .send_overflow = ep_send_overflow, .recv_overflow = ep_recv_overflow, .copy_out = ep_copy_out,
                       .report = ep_report, .fail = ep_fail, .signal = ep_signal};
    if (side_build(c, where, r) < 0)
        return NULL;
    if ((ep->pids = PyMem_Calloc(c->layout.n_reader, sizeof(long))) == NULL
        || (ep->bells = PyMem_Calloc(c->layout.n_reader + 1, sizeof(struct bell))) == NULL)
        return PyErr_NoMemory();
    for (uint32_t k = 0; k <= c->layout.n_reader; k++)
        ep->bells[k].ours = -1;
    c->policy = (rc_policy){.spin = sp, .recheck_interval = rv, .tight_looks = (uint32_t)(t < 0 ? 0 : t), .use_futex = futex,
                            .spin_max = smax};
    struct {
        PyObject **slot, *obj;
        const char *name;
    } m[] = {{&ep->m_send, obs, "send_overflow"}, {&ep->m_recv, obs, "recv_overflow"}, {&ep->m_timeout_error, obs, "timeout_error"},
             {&ep->m_check_writer, obs, "check_writer"}, {&ep->m_dead_error, obs, "dead_readers_error"},
             {&ep->m_evicted, obs, "evicted"}, {&ep->m_long_wait, obs, "long_wait"}, {&ep->m_unreachable, obs, "poller_unreachable"},
             {&ep->wait_label, (PyObject *)ep, "wait_label"},
             {&ep->m_evicted_error, (PyObject *)Py_TYPE(ep), "_evicted_error"}}; /* the class's: no cycle */
    for (size_t k = 0; k < sizeof m / sizeof m[0]; k++) {
        PyObject *v = PyObject_GetAttrString(m[k].obj, m[k].name);
        if (v == NULL) {
            if (k < 9 || !PyErr_ExceptionMatches(PyExc_AttributeError))
                return NULL;
            PyErr_Clear(); /* a writer has no _evicted_error */
        }
        Py_XSETREF(*m[k].slot, v);
    }
    ep->m_liveness = Py_NewRef(liveness);
    ep->cancelled = Py_NewRef(st->cancelled);
    ep->overflow_marker = Py_NewRef(st->overflow_marker);
    ep->mv_release = Py_NewRef(st->mv_release);
    ep->counters = Py_NewRef(counters);
    ep->cancel = Py_NewRef(cancel);
    if (cancel_register((CancelObject *)cancel, (PyObject *)ep) < 0)
        return NULL;
    c->st.s.counters = &((CountersObject *)counters)->c;
    c->st.s.cancel = &((CancelObject *)cancel)->c;
    if (writer)
        c->st.w.evict_dead = evict;
    Py_RETURN_NONE;
}

/* wake_all(): wake every sleeper on the ring's two eventcounts (shutdown; not a spec action, not
 * traced). The mapping is pinned meanwhile: a closed ring is left alone. */
static PyObject *
ep_wake_all(PyObject *self, PyObject *unused)
{
    Endpoint *ep = (Endpoint *)self;
    if (ep->c.buf == NULL || ep->m_send == NULL)
        Py_RETURN_NONE;
    int rc = rc_wake_all(&ep->c.layout, &ep->c.io);
    if (rc == RC_OK && PyErr_Occurred())
        PyErr_Clear(); /* the pin's error: the ring is closed, nothing to wake */
    return rc == RC_OK ? Py_NewRef(Py_None) : NULL;
}

#include "_protocol_sides.c"
