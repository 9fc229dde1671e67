/* _protocol_sides.c: the endpoint types' entry points and slots, part of the ringcast._protocol
 * binding (included by _protocol_endpoint.c, which has the upcalls). Each entry point parses its
 * arguments, pins the mapping for the call, calls one entry point of the core and returns its
 * result or raises its error. ringcast.endpoint has the docs of the sequences. */

/* Enter a call: the endpoint bound, the mapping pinned (released by leave) */
static Side *
enter(Endpoint *ep)
{
    if (bound(ep) == NULL || side_pin(&ep->c) == NULL)
        return NULL;
    return &ep->c;
}

/* The end of an entry point: the outer pin released, the call's objects dropped; NULL if the core
 * failed (its error is set), else `ok` */
static PyObject *
leave(Endpoint *ep, Side *c, int rc, PyObject *ok)
{
    side_unpin(c);
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
    Side *c = enter(ep);
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
    Side *c = enter(ep);
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
    Side *c = enter(ep);
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
            (void)rc_writer_abort(&c->st.w);
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

static PyObject *
wep_get_owed(Endpoint *ep, void *closure)
{
    if (bound(ep) == NULL)
        return NULL;
    return ep->c.st.w.owed_chunk < 0 ? Py_NewRef(Py_None) : PyLong_FromLong(ep->c.st.w.owed_chunk);
}

/* unread_readers(): the live readers that have not read the chunk at the cursor (what a claim
 * waits for; the core's one scan, rc_writer_unread). Not an entry point: the observer calls it
 * from inside one (a timeout's message, the long-wait log), so it leaves the call's objects be. */
static PyObject *
wep_unread_readers(Endpoint *ep, PyObject *unused)
{
    if (bound(ep) == NULL)
        return NULL;
    uint8_t *mark = PyMem_Malloc(ep->c.layout.n_reader);
    if (mark == NULL)
        return PyErr_NoMemory();
    int n = rc_writer_unread(&ep->c.st.w, mark); /* pins the mapping for its peeks */
    PyObject *out = n < 0 ? NULL : PyList_New(0);
    for (uint32_t r = 0; out != NULL && r < ep->c.layout.n_reader; r++) {
        PyObject *v = mark[r] == RC_UNREAD ? PyLong_FromUnsignedLong(r) : NULL;
        if (mark[r] == RC_UNREAD && (v == NULL || PyList_Append(out, v) < 0))
            Py_CLEAR(out);
        Py_XDECREF(v);
    }
    PyMem_Free(mark);
    return out;
}

/* live_readers: the readers whose flags the writer clears for each message (every one not evicted) */
static PyObject *
wep_get_live_readers(Endpoint *ep, void *closure)
{
    if (bound(ep) == NULL)
        return NULL;
    PyObject *out = PyList_New(0);
    for (uint32_t r = 0; out != NULL && r < ep->c.layout.n_reader; r++) {
        PyObject *v = ep->c.live[r] ? PyLong_FromUnsignedLong(r) : NULL;
        if (ep->c.live[r] && (v == NULL || PyList_Append(out, v) < 0))
            Py_CLEAR(out);
        Py_XDECREF(v);
    }
    return out;
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
    Side *c = enter(ep);
    if (c == NULL)
        return NULL;
    ep->copy_out = Py_NewRef(a[0]);
    ep->timeout = Py_XNewRef(a[1]);
    ep->deadline = Py_XNewRef(a[2]);
    ep->zero_copy = 0;
    int rc = rc_reader_receive(&c->st.r, timeout, &marker);
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

/* ready(): ReaderLoadWritten, ReaderLoadReadFlag, F4: is the chunk ours to read? */
static PyObject *
rep_ready(Endpoint *ep, PyObject *unused)
{
    int ready = 0;
    Side *c = enter(ep);
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
    Side *c = enter(ep);
    if (c == NULL)
        return NULL;
    ep->zero_copy = 1;
    int rc = rc_reader_acquire(&c->st.r, timeout, &data, &len);
    PyObject *view = rc == RC_OK ? chunk_view(c) : NULL;
    if (rc == RC_OK && view == NULL) {
        (void)rc_reader_release(&c->st.r);
        rc = RC_ERR_RAISED;
    }
    return leave(ep, c, rc, view);
}

/* _release_read(): after the block (also when it raised): F8, ReaderCheckEvicted, ReaderAck, notify */
static PyObject *
rep_release_read(Endpoint *ep, PyObject *unused)
{
    Side *c = enter(ep);
    if (c == NULL)
        return NULL;
    ep->zero_copy = 1;
    return leave(ep, c, rc_reader_release(&c->st.r), Py_NewRef(Py_None));
}

/* release(): drop the reader's view of the mapping (before the ring is closed); later copies raise */
static PyObject *
rep_release(Endpoint *ep, PyObject *unused)
{
    return ep->c.mv == NULL ? Py_NewRef(Py_None) : PyObject_CallOneArg(ep->mv_release, ep->c.mv);
}

static PyObject *
rep_get_owed(Endpoint *ep, void *closure)
{
    return bound(ep) == NULL ? NULL : PyBool_FromLong(ep->c.st.r.owed_payload);
}

static PyObject *
rep_get_gone(Endpoint *ep, void *closure)
{
    return bound(ep) == NULL ? NULL : PyBool_FromLong(ep->c.st.r.phase == RC_R_GONE);
}

/* ------------------------------------------------------------------------------ the types -- */

static int
ep_traverse(Endpoint *ep, visitproc visit, void *arg)
{
    PyObject **refs[] = {EP_REFS(ep)};
    for (size_t k = 0; k < sizeof refs / sizeof refs[0]; k++)
        Py_VISIT(*refs[k]);
    return side_traverse(&ep->c, visit, arg);
}

static int
ep_tp_clear(Endpoint *ep)
{
    PyObject **refs[] = {EP_REFS(ep)};
    for (size_t k = 0; k < sizeof refs / sizeof refs[0]; k++)
        Py_CLEAR(*refs[k]);
    return side_clear(&ep->c);
}

static void
ep_dealloc(Endpoint *ep)
{
    PyTypeObject *tp = Py_TYPE(ep);
    PyObject_GC_UnTrack(ep);
    ep_tp_clear(ep);
    side_free(&ep->c);
    PyMem_Free(ep->pids);
    for (uint32_t k = 0; ep->bells != NULL && k <= ep->c.layout.n_reader; k++)
        if (ep->bells[k].ours >= 0)
            close(ep->bells[k].ours);
    PyMem_Free(ep->bells);
    tp->tp_free((PyObject *)ep);
    Py_DECREF(tp);
}

/* poll(arm, check) -> bool: one round of the descriptor wait (core/rc_poll.c: rc_reader_poll,
 * rc_writer_poll; poll_consumed: rc_writer_poll_consumed) */
static PyObject *
poll_call(Endpoint *ep, PyObject *args, int consumed)
{
    int arm, check, ready = 0;
    if (!PyArg_ParseTuple(args, "pp:poll", &arm, &check))
        return NULL;
    Side *c = enter(ep);
    if (c == NULL)
        return NULL;
    int rc = c->st.s.side != RC_WRITER ? rc_reader_poll(&c->st.r, arm, check, &ready)
             : consumed                ? rc_writer_poll_consumed(&c->st.w, arm, check, &ready)
                                       : rc_writer_poll(&c->st.w, arm, check, &ready);
    return leave(ep, c, rc, PyBool_FromLong(ready));
}

static PyObject *
ep_poll(Endpoint *ep, PyObject *args)
{
    return poll_call(ep, args, 0);
}

static PyObject *
wep_poll_consumed(Endpoint *ep, PyObject *args)
{
    return poll_call(ep, args, 1);
}

/* disarm(): PollDisarm (the side stops polling) */
static PyObject *
ep_disarm(Endpoint *ep, PyObject *unused)
{
    Side *c = enter(ep);
    return c == NULL ? NULL : leave(ep, c, rc_poll_disarm(&c->st.s), Py_NewRef(Py_None));
}

/* drain(timeout=None): until every live reader has acked the last published chunk */
static PyObject *
wep_drain(Endpoint *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return call_core(ep, (core_entry){.writer_timed = rc_writer_drain}, "drain()", args, nargs, kwnames);
}

static PyObject *
ep_get_index(Endpoint *ep, void *closure)
{
    return bound(ep) == NULL ? NULL : PyLong_FromSize_t(ep->c.st.s.index);
}

static PyObject *
ep_get_counters(Endpoint *ep, void *closure)
{
    return Py_NewRef(ep->counters == NULL ? Py_None : ep->counters);
}

#define EP_GETSET                                                                                                        \
    {"index", (getter)ep_get_index, NULL, "the chunk this side is at (the next it writes / reads)", NULL},               \
    {"counters", (getter)ep_get_counters, NULL, "the side's Counters (set by _bind)", NULL}

#define EP_COMMON_METHODS                                                                                                \
    {"_bind", (PyCFunction)ep_bind, METH_VARARGS,                                                                        \
     "_bind(offsets, r, liveness, observer, counters, cancel, policy, evict_dead_readers): build the side, fill the "     \
     "core's interface (once)."},                                                                                        \
    {"wake_all", (PyCFunction)ep_wake_all, METH_NOARGS, "Wake every sleeper on the ring (shutdown; not a spec action)."}, \
    {"poll", (PyCFunction)ep_poll, METH_VARARGS, "poll(arm, check) -> bool: one round of the descriptor wait (core/rc_poll.c)."}, \
    {"disarm", (PyCFunction)ep_disarm, METH_NOARGS, "disarm(): PollDisarm, the side stops polling."}

static PyGetSetDef wep_getset[] = {
    EP_GETSET,
    {"owed_chunk", (getter)wep_get_owed, NULL, "the chunk whose message an error left owed (published before the next one), or None", NULL},
    {"live_readers", (getter)wep_get_live_readers, NULL, "the readers whose flags each message clears (not evicted)", NULL},
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
    {"poll_consumed", (PyCFunction)wep_poll_consumed, METH_VARARGS,
     "poll_consumed(arm, check) -> bool: the descriptor wait's round for every live reader done with the last message."},
    {"drain", (PyCFunction)(void (*)(void))wep_drain, METH_FASTCALL | METH_KEYWORDS,
     "drain($self, /, timeout=None)\n--\n\nWait until every live reader has acked the last published chunk (rc_writer_drain)."},
    {"unread_readers", (PyCFunction)wep_unread_readers, METH_NOARGS,
     "The live readers that have not read the chunk at the cursor (what a claim waits for)."},
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

static PyType_Spec wep_spec = {.name = "ringcast._protocol._WriterEndpoint", .basicsize = sizeof(Endpoint),
                               .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, .slots = wep_slots};

static PyGetSetDef rep_getset[] = {
    EP_GETSET,
    {"payload_owed", (getter)rep_get_owed, NULL, "a marker was acked but its payload not yet received", NULL},
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
    {"_release_read", (PyCFunction)rep_release_read, METH_NOARGS, "_release_read(): F8, check evicted, ack, notify."},
    {"release", (PyCFunction)rep_release, METH_NOARGS, "Drop this reader's view of the mapping (before the ring is closed)."},
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

static PyType_Spec rep_spec = {.name = "ringcast._protocol._ReaderEndpoint", .basicsize = sizeof(Endpoint),
                               .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, .slots = rep_slots};
