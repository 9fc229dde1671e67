/* _protocol_endpoint.c: the endpoint types (ringcast.endpoint's WriterEndpoint and ReaderEndpoint
 * subclass them), part of the ringcast._protocol binding (included by _protocol.c).
 *
 * Each entry point converts its arguments, keeps the call's Python objects where the interface's
 * upcalls find them, and calls one entry point of the core (rc_writer_publish, rc_reader_receive,
 * ...), which runs the whole sequence, its waits and its failure paths. The upcalls answer what
 * the core asks (ep_*: the observer's overflow I/O, liveness and logs, copy_out, the errors),
 * each with the observer's methods resolved once, at _bind. No upcall decides anything: the
 * core decides, the binding reports. */

typedef struct {
    PyObject_HEAD
    PyObject *cursor;   /* a _WriterSteps / _ReaderSteps (ringcast.ring.RingWriter / RingReader) */
    PyObject *counters; /* a Counters: the core's rc_counters */
    PyObject *cancel;   /* a Cancel: the core's rc_cancel */
    rc_policy policy;
    /* resolved at _bind: the observer's methods, the ring's liveness, the endpoint's error */
    PyObject *m_send, *m_recv, *m_timeout_error, *m_check_writer, *m_dead_error, *m_evicted, *m_long_wait;
    PyObject *m_liveness, *m_evicted_error;
    /* one call's objects, for the upcalls */
    PyObject *frames_out, *unpublished, *copy_out, *kept, *frames_in, *deadline, *timeout;
    int zero_copy;
} Endpoint;

static PyTypeObject *WriterEndpointType, *ReaderEndpointType;
static PyObject *overflow_marker; /* ringcast.endpoint.OVERFLOW: what copy_out returns for a marker chunk */

#define EP_OF(ctx) ((Endpoint *)((Cursor *)(ctx))->ep)

static int
no_endpoint(void)
{
    PyErr_SetString(PyExc_RuntimeError, "this ring cursor has no endpoint: build an endpoint from the ring");
    return RC_ERR_RAISED;
}

/* a call of an upcall's Python method: the core's code for its result */
static int
called(PyObject *r)
{
    Py_XDECREF(r);
    return r == NULL ? RC_ERR_RAISED : RC_OK;
}

/* [(r, pid)] of the readers whose liveness (the writer's last idle check) is `which` */
static PyObject *
readers_with(Cursor *c, int which)
{
    PyObject *out = PyList_New(0);
    for (uint32_t r = 0; out != NULL && r < c->layout.n_reader; r++) {
        if (c->liveness[r] != which)
            continue;
        PyObject *t = Py_BuildValue("(Il)", r, c->pids[r]);
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
    Cursor *c = ctx;
    Endpoint *ep = EP_OF(ctx);
    if (ep == NULL)
        return no_endpoint();
    saved_exc e;
    put_aside(&e);
    int v = RC_ALIVE;
    if (who == RC_WRITER) /* the observer raises for a dead writer, or an eviction */
        v = called(PyObject_CallFunction(ep->m_check_writer, "Od", (PyObject *)ep, waited));
    else {
        PyObject *res = PyObject_CallFunction(ep->m_liveness, "[i]", who), *dead, *unknown;
        if (res == NULL || !PyArg_ParseTuple(res, "OO", &dead, &unknown) || !PyList_Check(dead) || !PyList_Check(unknown))
            v = RC_ERR_RAISED;
        else {
            PyObject *hit = PyList_GET_SIZE(dead) ? PyList_GET_ITEM(dead, 0) : PyList_GET_SIZE(unknown) ? PyList_GET_ITEM(unknown, 0) : NULL;
            v = PyList_GET_SIZE(dead) ? RC_DEAD : PyList_GET_SIZE(unknown) ? RC_UNKNOWN : RC_ALIVE;
            if (hit != NULL && PyTuple_Check(hit) && PyTuple_GET_SIZE(hit) == 2)
                c->pids[who] = PyLong_AsLong(PyTuple_GET_ITEM(hit, 1));
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
    Endpoint *ep = EP_OF(ctx);
    if (ep == NULL)
        return no_endpoint();
    saved_exc e;
    put_aside(&e);
    return take_back(&e, called(PyObject_CallOneArg(ep->m_send, ep->frames_out)) == RC_OK);
}

/* the payload arrives into frames_in with no Python code between its return and the core's
 * owed_payload := 0 */
static int
ep_recv_overflow(void *ctx)
{
    Endpoint *ep = EP_OF(ctx);
    if (ep == NULL)
        return no_endpoint();
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
    Endpoint *ep = EP_OF(ctx);
    if (ep == NULL)
        return no_endpoint();
    saved_exc e;
    put_aside(&e);
    PyObject *view = chunk_view((Cursor *)ctx), *kept = NULL;
    if (view != NULL) {
        kept = PyObject_CallOneArg(ep->copy_out, view);
        if (Py_REFCNT(view) > 1) { /* somebody kept it: release it, as `with view:` does */
            saved_exc e2;
            put_aside(&e2);
            PyObject *r = PyObject_CallMethod(view, "release", NULL);
            if (r == NULL)
                Py_CLEAR(kept);
            Py_XDECREF(r);
            take_back(&e2, 1);
        }
        Py_DECREF(view);
    }
    int kind = kept == overflow_marker ? RC_MARKER : RC_COPIED;
    if (kind == RC_MARKER)
        Py_CLEAR(kept);
    Py_XSETREF(ep->kept, kept);
    return take_back(&e, kept != NULL || kind == RC_MARKER) == RC_OK ? kind : RC_ERR_RAISED;
}

static int
ep_report(void *ctx, int event, double value)
{
    Cursor *c = ctx;
    Endpoint *ep = EP_OF(ctx);
    if (ep == NULL)
        return no_endpoint();
    if (event == RC_REPORT_DROPPED && (ep->unpublished == NULL || ep->unpublished == Py_None))
        return RC_OK;
    saved_exc e;
    put_aside(&e);
    PyObject *r = NULL, *lst = NULL;
    if (event == RC_REPORT_DROPPED)
        r = PyObject_CallNoArgs(ep->unpublished);
    else if (event == RC_REPORT_EVICTED && (lst = readers_with(c, RC_DEAD)) != NULL)
        r = PyObject_CallFunction(ep->m_evicted, "OO", (PyObject *)ep, lst);
    else if (event == RC_REPORT_LONG_WAIT
             && (lst = c->st.s.side == RC_WRITER ? readers_with(c, RC_UNKNOWN) : PyList_New(0)) != NULL)
        r = PyObject_CallFunction(ep->m_long_wait, "OdO", (PyObject *)ep, value, lst);
    Py_XDECREF(lst);
    return take_back(&e, called(r) == RC_OK);
}

/* The core's errors as the project's exceptions (chained to one being handled) */
static void
ep_fail(PyObject *self, rc_status code, double value)
{
    Endpoint *ep = (Endpoint *)self;
    Cursor *c = (Cursor *)ep->cursor;
    saved_exc e;
    put_aside(&e);
    PyObject *exc = NULL, *lst = NULL;
    switch (code) {
    case RC_ERR_TIMEOUT:
        exc = PyObject_CallFunction(ep->m_timeout_error, "Od", self, value);
        break;
    case RC_ERR_CANCELLED: {
        PyObject *what = PyObject_GetAttrString(self, "what");
        exc = what == NULL ? NULL : project_error("Cancelled", PyUnicode_FromFormat("%S: shutdown() was called while waiting", what));
        Py_XDECREF(what);
        break;
    }
    case RC_ERR_DEAD_READERS:
        if ((lst = readers_with(c, RC_DEAD)) != NULL)
            exc = PyObject_CallFunction(ep->m_dead_error, "OOd", self, lst, value);
        break;
    case RC_ERR_EVICTED:
        exc = PyObject_CallFunction(ep->m_evicted_error, "Os", self,
                                    ep->zero_copy ? "what the block made of its bytes must be discarded" : "the copy is dropped");
        break;
    case RC_ERR_TOO_BIG:
        PyErr_Format(PyExc_ValueError, "the payload's %zd parts are %zd bytes, more than the chunk's max_chunk_bytes=%zd",
                     c->nparts, (Py_ssize_t)value, (Py_ssize_t)c->layout.max_chunk_bytes);
        break;
    case RC_ERR_CLOSED:
        if (e.t == NULL) /* else the pin's error is the one in hand */
            PyErr_SetString(PyExc_ValueError, "the ring is closed");
        break;
    default:
        PyErr_Format(PyExc_RuntimeError, "%R: the protocol core refused the call (error %d): acquire and commit/release "
                     "alternate, and an evicted reader receives nothing more", self, (int)code);
    }
    Py_XDECREF(lst);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    take_back(&e, 0);
}

/* ---------------------------------------------------------------------------- binding -- */

static Cursor *
bound(Endpoint *ep)
{
    if (ep->cursor == NULL || ((Cursor *)ep->cursor)->ep != (PyObject *)ep) {
        PyErr_SetString(PyExc_RuntimeError, "this endpoint is not bound: build it from a ring (its __init__ calls _bind)");
        return NULL;
    }
    return (Cursor *)ep->cursor;
}

/* The end of an entry point: the outer pin released, the call's objects dropped; NULL if the core
 * failed (its error is set), else `ok` */
static PyObject *
leave(Endpoint *ep, Cursor *c, int rc, PyObject *ok)
{
    cur_unpin(c);
    Py_CLEAR(ep->frames_out);
    Py_CLEAR(ep->unpublished);
    Py_CLEAR(ep->copy_out);
    Py_CLEAR(ep->deadline);
    Py_CLEAR(ep->timeout);
    if (rc == RC_OK)
        return ok;
    Py_XDECREF(ok);
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_SystemError, "the protocol core failed (error %d) without an exception", rc);
    return NULL;
}

/* _bind(ring, observer, counters, cancel, policy, evict_dead_readers): fill the interface once */
static PyObject *
ep_bind(Endpoint *ep, PyObject *args)
{
    PyObject *ring, *obs, *counters, *cancel, *policy;
    int evict;
    if (!PyArg_ParseTuple(args, "OOO!O!Op:_bind", &ring, &obs, CountersType, &counters, CancelType, &cancel, &policy, &evict))
        return NULL;
    if (ep->cursor == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "set the endpoint's cursor before _bind");
        return NULL;
    }
    Cursor *c = (Cursor *)ep->cursor;
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
    ep->policy = (rc_policy){sp, rv, (uint32_t)(t < 0 ? 0 : t), futex, smax};
    struct {
        PyObject **slot, *obj;
        const char *name;
    } m[] = {{&ep->m_send, obs, "send_overflow"}, {&ep->m_recv, obs, "recv_overflow"}, {&ep->m_timeout_error, obs, "timeout_error"},
             {&ep->m_check_writer, obs, "check_writer"}, {&ep->m_dead_error, obs, "dead_readers_error"},
             {&ep->m_evicted, obs, "evicted"}, {&ep->m_long_wait, obs, "long_wait"}, {&ep->m_liveness, ring, "reader_liveness"},
             {&ep->m_evicted_error, (PyObject *)Py_TYPE(ep), "_evicted_error"}}; /* the class's: no cycle */
    for (size_t k = 0; k < sizeof m / sizeof m[0]; k++) {
        PyObject *v = PyObject_GetAttrString(m[k].obj, m[k].name);
        if (v == NULL) {
            if (k < 8 || !PyErr_ExceptionMatches(PyExc_AttributeError))
                return NULL;
            PyErr_Clear(); /* a writer has no _evicted_error */
        }
        Py_XSETREF(*m[k].slot, v);
    }
    Py_XSETREF(ep->counters, Py_NewRef(counters));
    Py_XSETREF(ep->cancel, Py_NewRef(cancel));
    if (cancel_register((CancelObject *)cancel, (PyObject *)ep) < 0)
        return NULL;
    c->st.s.counters = &((CountersObject *)counters)->c;
    c->st.s.cancel = &((CancelObject *)cancel)->c;
    c->st.s.policy = &ep->policy;
    if (c->st.s.side == RC_WRITER)
        c->st.w.evict_dead = evict;
    c->ep = (PyObject *)ep;
    Py_RETURN_NONE;
}

/* wake_all(): wake every sleeper on the ring's two eventcounts (shutdown; not a spec action, not
 * traced). The mapping is pinned meanwhile: a closed ring is left alone. */
static PyObject *
ep_wake_all(PyObject *self, PyObject *unused)
{
    Endpoint *ep = (Endpoint *)self;
    if (ep->cursor == NULL)
        Py_RETURN_NONE;
    Cursor *c = (Cursor *)ep->cursor;
    if (c->buf == NULL)
        Py_RETURN_NONE;
    int rc = rc_wake_all(&c->layout, &c->io);
    if (rc == RC_OK && PyErr_Occurred())
        PyErr_Clear(); /* the pin's error: the ring is closed, nothing to wake */
    return rc == RC_OK ? Py_NewRef(Py_None) : NULL;
}

#include "_protocol_sides.c"
