/* _protocol_sides.c: the endpoint types' entry points and slots, part of the ringcast._protocol
 * binding (included by _protocol_endpoint.c, which has the upcalls). Each entry point parses its
 * arguments, pins the mapping for the call, calls one entry point of the core and returns its
 * result or raises its error. ringcast.endpoint has the docs of the sequences. */

/* Enter a call: the endpoint bound, the mapping pinned (released by leave) */
static Cursor *
enter(Endpoint *ep)
{
    Cursor *c = bound(ep);
    if (c == NULL || cur_pin(c) == NULL)
        return NULL;
    return c;
}

/* A core entry point that is a whole method by itself: its result is the method's None. One member
 * is set: the writer's without arguments, or a side's that takes the method's timeout=None. */
typedef struct core_entry {
    int (*writer)(rc_writer *w);
    int (*writer_timed)(rc_writer *w, double timeout);
    int (*reader_timed)(rc_reader *r, double timeout);
} core_entry;

/* Such a method: `name` (for argument errors) takes timeout=None, if the entry point does (else
 * args are ignored: METH_NOARGS); enter, one call of the core, leave. */
static PyObject *
call_core(Endpoint *ep, core_entry fn, const char *name, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[1] = {"timeout"};
    PyObject *a[1];
    double timeout = RC_NO_TIMEOUT;
    if (fn.writer == NULL && (parse(name, args, nargs, kwnames, names, 1, 1, 0, a) < 0 || seconds(a[0], &timeout) < 0))
        return NULL;
    Cursor *c = enter(ep);
    if (c == NULL)
        return NULL;
    int rc = fn.writer         ? fn.writer(&c->st.w)
             : fn.writer_timed ? fn.writer_timed(&c->st.w, timeout)
                               : fn.reader_timed(&c->st.r, timeout);
    return leave(ep, c, rc, Py_NewRef(Py_None));
}

/* ------------------------------------------------------------------------------ the writer -- */

/* publish(parts, timeout=None, overflow=None, *, split_payload=False, unpublished=None) */
static PyObject *
wep_publish(Endpoint *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[5] = {"parts", "timeout", "overflow", "split_payload", "unpublished"};
    PyObject *a[5];
    double timeout;
    Parts p;
    if (parse("publish()", args, nargs, kwnames, names, 5, 3, 1, a) < 0 || seconds(a[1], &timeout) < 0)
        return NULL;
    int split = a[3] ? PyObject_IsTrue(a[3]) : 0, overflow = a[2] != NULL && a[2] != Py_None;
    if (split < 0 || parts_get(&p, a[0]) < 0)
        return NULL;
    Cursor *c = enter(ep);
    if (c == NULL) {
        parts_release(&p);
        return NULL;
    }
    ep->frames_out = Py_XNewRef(a[2]);
    ep->unpublished = Py_XNewRef(a[4]);
    c->nparts = p.n;
    int rc = rc_writer_publish(&c->st.w, &p.parts, overflow, split, timeout);
    parts_release(&p);
    return leave(ep, c, rc, Py_NewRef(Py_None));
}

/* claim(timeout=None): WriterClaim until the chunk is free (one look, then the wait) */
static PyObject *
wep_claim(Endpoint *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return call_core(ep, (core_entry){.writer_timed = rc_writer_claim}, "claim()", args, nargs, kwnames);
}

/* _acquire_write(timeout): the chunk's view, for the caller to fill (write_chunk) */
static PyObject *
wep_acquire_write(Endpoint *ep, PyObject *arg)
{
    double timeout;
    uint8_t *data;
    if (seconds(arg, &timeout) < 0)
        return NULL;
    Cursor *c = enter(ep);
    if (c == NULL)
        return NULL;
    c->nparts = 0;
    int rc = rc_writer_acquire(&c->st.w, timeout, &data);
    PyObject *view = NULL;
    if (rc == RC_OK) {
        PyObject *mv = PyMemoryView_FromObject(c->buf), *sl = NULL;
        size_t lo = c->layout.datas[c->st.s.index];
        if (mv != NULL && (sl = Py_BuildValue("(nn)", (Py_ssize_t)lo, (Py_ssize_t)(lo + c->layout.max_chunk_bytes))) != NULL) {
            PyObject *s = PySlice_New(PyTuple_GET_ITEM(sl, 0), PyTuple_GET_ITEM(sl, 1), NULL);
            view = s == NULL ? NULL : PyObject_GetItem(mv, s);
            Py_XDECREF(s);
        }
        Py_XDECREF(sl);
        Py_XDECREF(mv);
        if (view == NULL) { /* the chunk stays claimed and unwritten: drop the message */
            rc_writer_abort(&c->st.w);
            rc = RC_ERR_RAISED;
        }
    }
    return leave(ep, c, rc, view);
}

/* _commit_write(): publish the chunk _acquire_write handed out */
static PyObject *
wep_commit_write(Endpoint *ep, PyObject *unused)
{
    return call_core(ep, (core_entry){.writer = rc_writer_commit}, NULL, NULL, 0, NULL);
}

/* _abort_write(): the caller's block failed: the message is dropped */
static PyObject *
wep_abort_write(Endpoint *ep, PyObject *unused)
{
    return call_core(ep, (core_entry){.writer = rc_writer_abort}, NULL, NULL, 0, NULL);
}

/* A single step of the side that needs the endpoint (tests and tools): rc_step */
static PyObject *
ep_step(Endpoint *ep, rc_action action, int as_bool)
{
    long out = 0;
    Cursor *c = enter(ep);
    if (c == NULL)
        return NULL;
    int rc = rc_step(&c->st.s, action, 0, &out);
    return leave(ep, c, rc, as_bool ? PyBool_FromLong(out) : Py_NewRef(Py_None));
}

/* Spec: WriterSendOverflow alone: _writer_send_overflow(frames) */
static PyObject *
wep_send_overflow(Endpoint *ep, PyObject *frames)
{
    Py_XSETREF(ep->frames_out, Py_NewRef(frames));
    return ep_step(ep, RC_WriterSendOverflow, 0);
}

/* Spec: ParkRecheck alone (its tracepoint, then the side's look): _park_recheck() -> bool */
static PyObject *
ep_park_recheck(Endpoint *ep, PyObject *unused)
{
    return ep_step(ep, RC_ParkRecheck, 1);
}

/* _finish(): publish what an error left owed, then wake */
static PyObject *
wep_finish(Endpoint *ep, PyObject *unused)
{
    return call_core(ep, (core_entry){.writer = rc_writer_finish}, NULL, NULL, 0, NULL);
}

static PyObject *
wep_get_owed(Endpoint *ep, void *closure)
{
    Cursor *c = bound(ep);
    if (c == NULL)
        return NULL;
    return c->st.w.owed_chunk < 0 ? Py_NewRef(Py_None) : PyLong_FromLong(c->st.w.owed_chunk);
}

static PyObject *
wep_get_wake_owed(Endpoint *ep, void *closure)
{
    Cursor *c = bound(ep);
    return c == NULL ? NULL : PyBool_FromLong(c->st.w.wake_owed);
}

/* ------------------------------------------------------------------------------- a reader -- */

/* receive(copy_out, timeout=None, deadline=None) -> (kept, None) | (None, frames) */
static PyObject *
rep_receive(Endpoint *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[3] = {"copy_out", "timeout", "deadline"};
    PyObject *a[3];
    double timeout;
    int marker = 0;
    if (parse("receive()", args, nargs, kwnames, names, 3, 3, 1, a) < 0 || seconds(a[1], &timeout) < 0)
        return NULL;
    Cursor *c = enter(ep);
    if (c == NULL)
        return NULL;
    ep->copy_out = Py_NewRef(a[0]);
    ep->timeout = Py_XNewRef(a[1]);
    ep->deadline = Py_XNewRef(a[2]);
    ep->zero_copy = 0;
    int rc = rc_reader_receive(&c->st.r, timeout, RC_NO_TIMEOUT, &marker);
    PyObject *kept = ep->kept, *frames = ep->frames_in, *res = NULL;
    ep->kept = ep->frames_in = NULL;
    if (rc == RC_OK)
        res = marker ? PyTuple_Pack(2, Py_None, frames) : PyTuple_Pack(2, kept, Py_None);
    Py_XDECREF(kept);
    Py_XDECREF(frames);
    if (rc == RC_OK && res == NULL)
        rc = RC_ERR_RAISED;
    return leave(ep, c, rc, res);
}

/* Spec: ReaderRecvOverflow alone: _reader_recv_overflow(deadline, timeout) -> frames */
static PyObject *
rep_recv_overflow(Endpoint *ep, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "_reader_recv_overflow(deadline, timeout): %zd arguments", nargs);
    ep->deadline = Py_NewRef(args[0]);
    ep->timeout = Py_NewRef(args[1]);
    PyObject *r = ep_step(ep, RC_ReaderRecvOverflow, 0), *frames = ep->frames_in;
    ep->frames_in = NULL;
    if (r == NULL) {
        Py_XDECREF(frames);
        return NULL;
    }
    Py_DECREF(r);
    return frames;
}

/* ready(): ReaderLoadWritten, ReaderLoadReadFlag, F4: is the chunk ours to read? */
static PyObject *
rep_ready(Endpoint *ep, PyObject *unused)
{
    int ready = 0;
    Cursor *c = enter(ep);
    if (c == NULL)
        return NULL;
    int rc = rc_reader_look(&c->st.r, &ready);
    return leave(ep, c, rc, PyBool_FromLong(ready));
}

/* wait_ready(timeout=None): look until ready (one look, then the wait) */
static PyObject *
rep_wait_ready(Endpoint *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return call_core(ep, (core_entry){.reader_timed = rc_reader_wait}, "wait_ready()", args, nargs, kwnames);
}

/* _acquire_read(timeout): the next chunk's view (read_chunk) */
static PyObject *
rep_acquire_read(Endpoint *ep, PyObject *arg)
{
    double timeout;
    const uint8_t *data;
    size_t len;
    if (seconds(arg, &timeout) < 0)
        return NULL;
    Cursor *c = enter(ep);
    if (c == NULL)
        return NULL;
    ep->zero_copy = 1;
    int rc = rc_reader_acquire(&c->st.r, timeout, &data, &len);
    PyObject *view = rc == RC_OK ? chunk_view(c) : NULL;
    if (rc == RC_OK && view == NULL) {
        rc_reader_release(&c->st.r, 1);
        rc = RC_ERR_RAISED;
    }
    return leave(ep, c, rc, view);
}

/* _release_read(failed): after the block: F8, ReaderCheckEvicted, ReaderAck, notify */
static PyObject *
rep_release_read(Endpoint *ep, PyObject *arg)
{
    int failed = PyObject_IsTrue(arg);
    if (failed < 0)
        return NULL;
    Cursor *c = enter(ep);
    if (c == NULL)
        return NULL;
    ep->zero_copy = 1;
    return leave(ep, c, rc_reader_release(&c->st.r, failed), Py_NewRef(Py_None));
}

static PyObject *
rep_get_owed(Endpoint *ep, void *closure)
{
    Cursor *c = bound(ep);
    return c == NULL ? NULL : PyBool_FromLong(c->st.r.owed_payload);
}

static PyObject *
rep_get_gone(Endpoint *ep, void *closure)
{
    Cursor *c = bound(ep);
    return c == NULL ? NULL : PyBool_FromLong(c->st.r.phase == RC_R_GONE);
}

/* ------------------------------------------------------------------------------ the types -- */

static int
ep_traverse(Endpoint *ep, visitproc visit, void *arg)
{
    PyObject **refs[] = {&ep->cursor, &ep->counters, &ep->cancel, &ep->m_send, &ep->m_recv, &ep->m_timeout_error,
                         &ep->m_check_writer, &ep->m_dead_error, &ep->m_evicted, &ep->m_long_wait, &ep->m_liveness,
                         &ep->m_evicted_error, &ep->frames_out, &ep->unpublished, &ep->copy_out, &ep->kept,
                         &ep->frames_in, &ep->deadline, &ep->timeout};
    for (size_t k = 0; k < sizeof refs / sizeof refs[0]; k++)
        Py_VISIT(*refs[k]);
    Py_VISIT(Py_TYPE(ep));
    return 0;
}

static int
ep_tp_clear(Endpoint *ep)
{
    Cursor *c = (Cursor *)ep->cursor;
    if (c != NULL && c->ep == (PyObject *)ep) { /* the cursor goes back to its own counters and policy */
        c->ep = NULL;
        c->st.s.counters = &c->counters;
        c->st.s.policy = &c->policy;
        c->st.s.cancel = NULL;
    }
    PyObject **refs[] = {&ep->cursor, &ep->counters, &ep->cancel, &ep->m_send, &ep->m_recv, &ep->m_timeout_error,
                         &ep->m_check_writer, &ep->m_dead_error, &ep->m_evicted, &ep->m_long_wait, &ep->m_liveness,
                         &ep->m_evicted_error, &ep->frames_out, &ep->unpublished, &ep->copy_out, &ep->kept,
                         &ep->frames_in, &ep->deadline, &ep->timeout};
    for (size_t k = 0; k < sizeof refs / sizeof refs[0]; k++)
        Py_CLEAR(*refs[k]);
    return 0;
}

static void
ep_dealloc(Endpoint *ep)
{
    PyTypeObject *tp = Py_TYPE(ep);
    PyObject_GC_UnTrack(ep);
    ep_tp_clear(ep);
    tp->tp_free((PyObject *)ep);
    Py_DECREF(tp);
}

static PyObject *
ep_get_cursor(Endpoint *ep, void *closure)
{
    return Py_NewRef(ep->cursor == NULL ? Py_None : ep->cursor);
}

/* The cursor is set once, by the endpoint's constructor: a cursor of the endpoint's side. */
static int
ep_set_cursor(Endpoint *ep, PyObject *value, void *closure)
{
    PyTypeObject *want = PyObject_TypeCheck(ep, WriterEndpointType) ? WriterStepsType : ReaderStepsType;
    if (value == NULL || !PyObject_TypeCheck(value, want)) {
        PyErr_Format(PyExc_TypeError, "an endpoint's cursor is a %s, got %R", want->tp_name, value);
        return -1;
    }
    if (ep->cursor != NULL) {
        PyErr_SetString(PyExc_AttributeError, "an endpoint's cursor is set once");
        return -1;
    }
    if (((Cursor *)value)->ep != NULL) {
        PyErr_SetString(PyExc_ValueError, "this cursor belongs to another endpoint");
        return -1;
    }
    ep->cursor = Py_NewRef(value);
    return 0;
}

static PyObject *
ep_get_counters(Endpoint *ep, void *closure)
{
    return Py_NewRef(ep->counters == NULL ? Py_None : ep->counters);
}

#define EP_GETSET                                                                                                        \
    {"cursor", (getter)ep_get_cursor, (setter)ep_set_cursor, "the side's ring cursor (set once)", NULL},                 \
    {"counters", (getter)ep_get_counters, NULL, "the side's Counters (set by _bind)", NULL}

#define EP_COMMON_METHODS                                                                                                \
    {"_bind", (PyCFunction)ep_bind, METH_VARARGS,                                                                        \
     "_bind(ring, observer, counters, cancel, policy, evict_dead_readers): fill the core's interface (once)."},          \
    {"wake_all", (PyCFunction)ep_wake_all, METH_NOARGS, "Wake every sleeper on the ring (shutdown; not a spec action)."}

static PyGetSetDef wep_getset[] = {
    EP_GETSET,
    {"owed", (getter)wep_get_owed, NULL, "the chunk whose message an error left owed (published before the next one), or None", NULL},
    {"wake_owed", (getter)wep_get_wake_owed, NULL, "a published message whose notify an error cut short", NULL},
    {NULL},
};

static PyMethodDef wep_methods[] = {
    {"publish", (PyCFunction)(void (*)(void))wep_publish, METH_FASTCALL | METH_KEYWORDS,
     "publish($self, /, parts, timeout=None, overflow=None, *, split_payload=False, unpublished=None)\n--\n\n"
     "Broadcast one message (the core's rc_writer_publish; ringcast.endpoint has the sequence and its abort rule)."},
    {"claim", (PyCFunction)(void (*)(void))wep_claim, METH_FASTCALL | METH_KEYWORDS,
     "claim($self, /, timeout=None)\n--\n\nWriterClaim until the chunk is free: one look, then spin and park."},
    {"_acquire_write", (PyCFunction)wep_acquire_write, METH_O, "_acquire_write(timeout): claim; the chunk's view to fill."},
    {"_commit_write", (PyCFunction)wep_commit_write, METH_NOARGS, "_commit_write(): publish the acquired chunk."},
    {"_abort_write", (PyCFunction)wep_abort_write, METH_NOARGS, "_abort_write(): drop the acquired chunk's message."},
    {"_finish", (PyCFunction)wep_finish, METH_NOARGS, "_finish(): publish what an error left owed, then wake."},
    {"_writer_send_overflow", (PyCFunction)wep_send_overflow, METH_O, "Spec: WriterSendOverflow alone (frames)."},
    {"_park_recheck", (PyCFunction)ep_park_recheck, METH_NOARGS, "Spec: ParkRecheck alone: its tracepoint, then the look."},
    EP_COMMON_METHODS,
    {NULL},
};

static PyType_Slot wep_slots[] = {
    {Py_tp_doc, "The writer's side of the protocol core; ringcast.endpoint.WriterEndpoint subclasses it."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, ep_dealloc},
    {Py_tp_traverse, ep_traverse},
    {Py_tp_clear, ep_tp_clear},
    {Py_tp_methods, wep_methods},
    {Py_tp_getset, wep_getset},
    {0, NULL},
};

static PyType_Spec wep_spec = {"ringcast._protocol._WriterEndpoint", sizeof(Endpoint), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, wep_slots};

static PyGetSetDef rep_getset[] = {
    EP_GETSET,
    {"owed", (getter)rep_get_owed, NULL, "a marker was acked but its payload not yet received", NULL},
    {"gone", (getter)rep_get_gone, NULL, "the writer evicted this reader: it receives nothing more", NULL},
    {NULL},
};

static PyMethodDef rep_methods[] = {
    {"receive", (PyCFunction)(void (*)(void))rep_receive, METH_FASTCALL | METH_KEYWORDS,
     "receive($self, /, copy_out, timeout=None, deadline=None)\n--\n\n"
     "Receive the next message, as (kept, None) or (None, frames) (the core's rc_reader_receive; ringcast.endpoint has the sequence)."},
    {"ready", (PyCFunction)rep_ready, METH_NOARGS, "ReaderLoadWritten, ReaderLoadReadFlag, F4: is the chunk ours to read?"},
    {"wait_ready", (PyCFunction)(void (*)(void))rep_wait_ready, METH_FASTCALL | METH_KEYWORDS,
     "wait_ready($self, /, timeout=None)\n--\n\nLook until ready(): one look, then spin and park."},
    {"_acquire_read", (PyCFunction)rep_acquire_read, METH_O, "_acquire_read(timeout): wait; the next chunk's view."},
    {"_release_read", (PyCFunction)rep_release_read, METH_O, "_release_read(failed): F8, check evicted, ack, notify."},
    {"_reader_recv_overflow", (PyCFunction)(void (*)(void))rep_recv_overflow, METH_FASTCALL,
     "Spec: ReaderRecvOverflow alone (deadline, timeout) -> frames."},
    {"_park_recheck", (PyCFunction)ep_park_recheck, METH_NOARGS, "Spec: ParkRecheck alone: its tracepoint, then the look."},
    EP_COMMON_METHODS,
    {NULL},
};

static PyType_Slot rep_slots[] = {
    {Py_tp_doc, "A reader's side of the protocol core; ringcast.endpoint.ReaderEndpoint subclasses it."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, ep_dealloc},
    {Py_tp_traverse, ep_traverse},
    {Py_tp_clear, ep_tp_clear},
    {Py_tp_methods, rep_methods},
    {Py_tp_getset, rep_getset},
    {0, NULL},
};

static PyType_Spec rep_spec = {"ringcast._protocol._ReaderEndpoint", sizeof(Endpoint), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, rep_slots};
