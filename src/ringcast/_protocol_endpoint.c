/* _protocol_endpoint.c: the endpoints' per-message sequence (the order spec/Ring.tla proves),
 * part of the ringcast._protocol extension: included by _protocol.c after the steps it orders
 * (_protocol_ring.c, _protocol_wait.c), which it calls as C functions.
 *
 * ringcast.endpoint's WriterEndpoint and ReaderEndpoint subclass the two types below and keep,
 * in Python, what is not per message: construction, the wait loop (ringcast.waiting.Waiter,
 * entered through the endpoint's _wait only when the first look fails), the abort and owed
 * bookkeeping (_aborted, _finish), the overflow channel's steps (WriterSendOverflow,
 * ReaderRecvOverflow: their I/O is the observer's), the zero-copy write_chunk / read_chunk, and
 * the docs of the whole sequence (its module docstring). This file is the sequence a message
 * takes when nothing goes wrong, and the hand-off to those methods when something does:
 *
 *   publish:  [_finish] _claim_message (claim: WriterClaim [_wait]; WriterClearWritten),
 *             WriterWritePayload, [_writer_send_overflow], _clear_flags_and_publish (F7;
 *             WriterClearReadFlag for each live reader; WriterPublish), notify; on an exception
 *             _aborted(chunk, unpublished), then the exception propagates.
 *   receive:  [owed: _reader_recv_overflow] wait_ready (ready: ReaderLoadWritten,
 *             ReaderLoadReadFlag, F4 [_wait]), ReaderCopy, copy_out(view), ReaderCheckEvicted,
 *             then always ReaderAck and notify; [marker: _reader_recv_overflow].
 *
 * Each method of the sequence (the endpoint's and its cursor's and eventcount's steps) is
 * called as the C function when the object's class does not override it, else by name: the
 * planted-bug variants of tests/stateful subclass the endpoints (ready, receive,
 * _clear_flags_and_publish) and the cursors (_writer_claim), and run inside this same sequence.
 * The lookup is the type's attribute cache (_PyType_Lookup), a few nanoseconds; an override set
 * on an instance rather than its class is not seen. The steps' tracepoints are theirs
 * (_protocol.c): this file adds none. */

typedef struct {
    PyObject_HEAD
    PyObject *cursor;   /* a _WriterSteps / _ReaderSteps (ringcast.ring.RingWriter / RingReader) */
    PyObject *notifies; /* the EventCount the other side parks on */
    PyObject *owed;     /* the writer's: None or the chunk an exception must not drop (payload out, or a flag cleared) */
    char wake_owed;     /* the writer's: a published message's notify was cut short */
    char owed_payload;  /* a reader's: a marker was acked, its payload not yet received */
} Endpoint;

static PyTypeObject *WriterStepsType, *ReaderStepsType, *WriterEndpointType, *ReaderEndpointType;
static PyObject *overflow_marker; /* ringcast.endpoint.OVERFLOW: what copy_out returns for a marker chunk */
static PyObject *s_m_writer_claim, *s_m_writer_clear_written, *s_m_writer_write_payload, *s_m_writer_clear_read_flag,
    *s_m_writer_publish, *s_m_reader_load_written, *s_m_reader_load_read_flag, *s_m_reader_copy,
    *s_m_reader_check_evicted, *s_m_reader_ack, *s_m_notify, *s_m_ready, *s_m_wait_ready, *s_m_claim,
    *s_m_claim_message, *s_m_clear_flags_and_publish, *s_m_wait, *s_m_finish, *s_m_aborted,
    *s_m_send_overflow, *s_m_recv_overflow, *s_m_evicted_error, *s_m_release, *s_parks_on, *s_timeout,
    *s_overflow, *s_split_payload, *s_unpublished, *s_deadline, *s_parts, *s_copy_out;

/* Does obj's class take `name` from `base` (no Python subclass overrides it)? */
static inline int
inherited(PyObject *obj, PyTypeObject *base, PyObject *name)
{
    PyTypeObject *tp = Py_TYPE(obj);
    return tp == base || _PyType_Lookup(tp, name) == _PyType_Lookup(base, name);
}

/* One step of a cursor, or one method of an endpoint: the C function, or the subclass's override
 * by name. `arg` NULL: none. */
static PyObject *
step(PyObject *cur, PyTypeObject *base, PyObject *name, PyCFunction fn, PyObject *arg)
{
    if (inherited(cur, base, name))
        return fn(cur, arg);
    return arg == NULL ? PyObject_CallMethodNoArgs(cur, name) : PyObject_CallMethodOneArg(cur, name, arg);
}

/* A call's result, dropped: 0, or -1 with an exception set. */
static inline int
done(PyObject *r)
{
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* A step that answers a flag byte or a bool: 1 if it equals `want`, 0 if not, -1 on error. */
static int
step_is(PyObject *cur, PyTypeObject *base, PyObject *name, PyCFunction fn, long want)
{
    PyObject *v = step(cur, base, name, fn, NULL);
    if (v == NULL)
        return -1;
    long got = PyLong_AsLong(v);
    Py_DECREF(v);
    if (got == -1 && PyErr_Occurred())
        return -1;
    return got == want;
}

/* notifies.notify(side, index): wake whoever parks on the other side's eventcount (a subclass's
 * override by name, as EventCount.notify calls its own steps). */
static PyObject *
notify_other(Endpoint *ep, PyObject *side)
{
    PyObject *idx = PyLong_FromSsize_t(((Cursor *)ep->cursor)->index);
    if (idx == NULL)
        return NULL;
    PyObject *args[2] = {side, idx};
    PyObject *res = notify_step((EventCountObject *)ep->notifies, ec_notify, s_m_notify, args);
    Py_DECREF(idx);
    return res;
}

/* The first look failed: the wait loop, self._wait(owner.<ready>, self.parks_on, side, timeout),
 * which calls owner's `ready` (the cursor's WriterClaim, the endpoint's ready) until it is true. */
static PyObject *
enter_wait(Endpoint *ep, PyObject *owner, PyObject *ready_name, PyObject *side, PyObject *timeout)
{
    PyObject *ready = PyObject_GetAttr(owner, ready_name), *ec = PyObject_GetAttr((PyObject *)ep, s_parks_on), *res = NULL;
    if (ready != NULL && ec != NULL) {
        PyObject *wargs[5] = {(PyObject *)ep, ready, ec, side, timeout ? timeout : Py_None};
        res = PyObject_VectorcallMethod(s_m_wait, wargs, 5, NULL);
    }
    Py_XDECREF(ready);
    Py_XDECREF(ec);
    return res;
}

static int
bound(Endpoint *ep)
{
    if (ep->cursor == NULL || ep->notifies == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this endpoint has no cursor or eventcount yet: build it from a ring");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------ the writer -- */

/* WriterClaim until the chunk at the cursor is free: one look, then the wait loop (_wait). */
static PyObject *
wep_claim(Endpoint *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *timeout;
    if (parse("claim()", args, nargs, kwnames, &s_timeout, 1, 1, 0, &timeout) < 0 || bound(ep) < 0)
        return NULL;
    int free_ = step_is(ep->cursor, WriterStepsType, s_m_writer_claim, (PyCFunction)writer_claim, 1);
    if (free_ != 0)
        return free_ < 0 ? NULL : Py_NewRef(Py_None);
    return enter_wait(ep, ep->cursor, s_m_writer_claim, s_writer, timeout);
}

/* Finish what an earlier exception left owed, claim the chunk at the cursor, clear its written
 * byte; the chunk (-1 with an exception set). */
static Py_ssize_t
claim_message(Endpoint *ep, PyObject *timeout)
{
    if (((ep->owed != NULL && ep->owed != Py_None) || ep->wake_owed)
        && done(PyObject_CallMethodNoArgs((PyObject *)ep, s_m_finish)) < 0)
        return -1;
    Py_ssize_t c = ((Cursor *)ep->cursor)->index;
    PyObject *r = inherited((PyObject *)ep, WriterEndpointType, s_m_claim) ? wep_claim(ep, &timeout, 1, NULL)
                                                                         : PyObject_CallMethodOneArg((PyObject *)ep, s_m_claim, timeout);
    if (done(r) < 0
        || done(step(ep->cursor, WriterStepsType, s_m_writer_clear_written, (PyCFunction)writer_clear_written, NULL)) < 0)
        return -1;
    return c;
}

static PyObject *
wep_claim_message(Endpoint *ep, PyObject *timeout)
{
    if (bound(ep) < 0)
        return NULL;
    Py_ssize_t c = claim_message(ep, timeout);
    return c < 0 ? NULL : PyLong_FromSsize_t(c);
}

/* Clear every live reader's flag, then publish (the order spec/Ring.tla proves). */
static PyObject *
wep_clear_flags_and_publish(Endpoint *ep, PyObject *unused)
{
    if (bound(ep) < 0)
        return NULL;
    PyObject *cur = ep->cursor, *live = ((Cursor *)cur)->live_readers;
    /* FlagOut: once a flag is cleared a reader may take the chunk, so the message is owed (finished, never dropped) */
    PyObject *c = PyLong_FromSsize_t(((Cursor *)cur)->index);
    if (c == NULL)
        return NULL;
    Py_XSETREF(ep->owed, c);
    rc_fence(); /* F7: the payload is visible before any reader can see its flag cleared */
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(live); k++) {
        PyObject *reader = Py_NewRef(PyList_GET_ITEM(live, k));
        int bad = done(step(cur, WriterStepsType, s_m_writer_clear_read_flag, (PyCFunction)writer_clear_read_flag, reader));
        Py_DECREF(reader);
        if (bad)
            return NULL;
    }
    if (done(step(cur, WriterStepsType, s_m_writer_publish, (PyCFunction)writer_publish, NULL)) < 0)
        return NULL;
    Py_XSETREF(ep->owed, Py_NewRef(Py_None)); /* (an exception before this store: _finish sees the chunk published) */
    Py_RETURN_NONE;
}

/* publish(parts, timeout=None, overflow=None, *, split_payload=False, unpublished=None):
 * ringcast.endpoint.WriterEndpoint.publish has the docs. */
static PyObject *
wep_publish(Endpoint *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *names[5] = {s_parts, s_timeout, s_overflow, s_split_payload, s_unpublished}, *a[5];
    if (parse("publish()", args, nargs, kwnames, names, 5, 3, 1, a) < 0)
        return NULL;
    if (bound(ep) < 0)
        return NULL;
    PyObject *parts = a[0], *timeout = a[1] ? a[1] : Py_None, *overflow = a[2] ? a[2] : Py_None;
    PyObject *unpublished = a[4] ? a[4] : Py_None, *cur = ep->cursor;
    int split = a[3] ? PyObject_IsTrue(a[3]) : 0;
    if (split < 0)
        return NULL;
    Py_ssize_t c = claim_message(ep, timeout);
    if (c < 0)
        goto abort;
    if (split) {
        PyObject *head = PySequence_GetSlice(parts, 0, 1);
        int bad = head == NULL || done(step(cur, WriterStepsType, s_m_writer_write_payload, (PyCFunction)writer_write_payload, head));
        Py_XDECREF(head);
        if (bad)
            goto abort;
    }
    if (done(step(cur, WriterStepsType, s_m_writer_write_payload, (PyCFunction)writer_write_payload, parts)) < 0)
        goto abort;
    if (overflow != Py_None && done(PyObject_CallMethodOneArg((PyObject *)ep, s_m_send_overflow, overflow)) < 0)
        goto abort;
    if (done(step((PyObject *)ep, WriterEndpointType, s_m_clear_flags_and_publish, (PyCFunction)wep_clear_flags_and_publish,
                  NULL)) < 0)
        goto abort;
    if (done(notify_other(ep, s_writer)) < 0)
        goto abort;
    Py_RETURN_NONE;
abort:; /* drop or finish the message (_aborted), then re-raise */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *ci = PyLong_FromSsize_t(c);
    if (ci != NULL) {
        PyObject *cargs[3] = {(PyObject *)ep, ci, unpublished};
        done(PyObject_VectorcallMethod(s_m_aborted, cargs, 3, NULL));
        Py_DECREF(ci);
    }
    rethrow(et, ev, tb);
    return NULL;
}

/* ------------------------------------------------------------------------------- a reader -- */

/* ReaderLoadWritten, ReaderLoadReadFlag (short-circuit: after written = 0 no flag load), F4. */
static PyObject *
rep_ready(Endpoint *ep, PyObject *unused)
{
    if (bound(ep) < 0)
        return NULL;
    int ok = step_is(ep->cursor, ReaderStepsType, s_m_reader_load_written, (PyCFunction)reader_load_written, 1);
    if (ok > 0)
        ok = step_is(ep->cursor, ReaderStepsType, s_m_reader_load_read_flag, (PyCFunction)reader_load_read_flag, 0);
    if (ok < 0)
        return NULL;
    if (!ok)
        Py_RETURN_FALSE;
    rc_fence(); /* F4: the copy reads the payload published with the flags just loaded */
    Py_RETURN_TRUE;
}

/* Look until ready: one look, then the wait loop (_wait). */
static PyObject *
rep_wait_ready(Endpoint *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *timeout;
    if (parse("wait_ready()", args, nargs, kwnames, &s_timeout, 1, 1, 0, &timeout) < 0 || bound(ep) < 0)
        return NULL;
    int ok = truth(step((PyObject *)ep, ReaderEndpointType, s_m_ready, (PyCFunction)rep_ready, NULL));
    if (ok != 0)
        return ok < 0 ? NULL : Py_NewRef(Py_None);
    return enter_wait(ep, (PyObject *)ep, s_m_ready, ((Cursor *)ep->cursor)->side, timeout);
}

/* ReaderCopy, copy_out(view) and ReaderCheckEvicted: what copy_out kept (NULL: an exception). */
static PyObject *
copy_chunk(Endpoint *ep, PyObject *copy_out)
{
    PyObject *cur = ep->cursor;
    PyObject *view = step(cur, ReaderStepsType, s_m_reader_copy, (PyCFunction)reader_copy, NULL);
    if (view == NULL)
        return NULL;
    PyObject *kept = PyObject_CallOneArg(copy_out, view);
    /* the view is released on the way out, as `with view:` does; if nobody kept it, dropping
     * the last reference is that release */
    if (Py_REFCNT(view) > 1) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *r = PyObject_CallMethodNoArgs(view, s_m_release);
        if (r == NULL)
            Py_CLEAR(kept);
        Py_XDECREF(r);
        rethrow(et, ev, tb);
    }
    Py_DECREF(view);
    if (kept == NULL)
        return NULL;
    int evicted = step_is(cur, ReaderStepsType, s_m_reader_check_evicted, (PyCFunction)reader_check_evicted, 1);
    if (evicted == 0)
        return kept;
    Py_DECREF(kept);
    if (evicted > 0) {
        PyObject *exc = PyObject_CallMethodNoArgs((PyObject *)ep, s_m_evicted_error);
        if (exc != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
    }
    return NULL;
}

/* receive(copy_out, timeout=None, deadline=None): ringcast.endpoint.ReaderEndpoint.receive has
 * the docs. */
static PyObject *
rep_receive(Endpoint *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *names[3] = {s_copy_out, s_timeout, s_deadline}, *a[3];
    if (parse("receive()", args, nargs, kwnames, names, 3, 3, 1, a) < 0)
        return NULL;
    if (bound(ep) < 0)
        return NULL;
    PyObject *self = (PyObject *)ep, *timeout = a[1] ? a[1] : Py_None, *deadline = a[2] ? a[2] : Py_None;
    PyObject *rargs[3] = {self, deadline, timeout}, *frames;
    if (!ep->owed_payload) {
        PyObject *r = inherited(self, ReaderEndpointType, s_m_wait_ready) ? rep_wait_ready(ep, &timeout, 1, NULL)
                                                                          : PyObject_CallMethodOneArg(self, s_m_wait_ready, timeout);
        if (done(r) < 0)
            return NULL;
        PyObject *kept = copy_chunk(ep, a[0]);
        /* finally: the chunk is acked and the writer woken, also when the copy raised */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (done(step(ep->cursor, ReaderStepsType, s_m_reader_ack, (PyCFunction)reader_ack, NULL)) == 0)
            done(notify_other(ep, ((Cursor *)ep->cursor)->side));
        if (PyErr_Occurred())
            Py_CLEAR(kept);
        rethrow(et, ev, tb);
        if (kept == NULL)
            return NULL;
        if (kept != overflow_marker) {
            PyObject *res = PyTuple_Pack(2, kept, Py_None);
            Py_DECREF(kept);
            return res;
        }
        Py_DECREF(kept);
        ep->owed_payload = 1;
    }
    /* a marker: its payload, now or owed from a receive that timed out on it */
    if ((frames = PyObject_VectorcallMethod(s_m_recv_overflow, rargs, 3, NULL)) == NULL)
        return NULL;
    PyObject *res = PyTuple_Pack(2, Py_None, frames);
    Py_DECREF(frames);
    return res;
}

/* ------------------------------------------------------------------------------ the types -- */

static int
ep_traverse(Endpoint *ep, visitproc visit, void *arg)
{
    Py_VISIT(ep->cursor);
    Py_VISIT(ep->notifies);
    Py_VISIT(ep->owed);
    Py_VISIT(Py_TYPE(ep));
    return 0;
}

static int
ep_tp_clear(Endpoint *ep)
{
    Py_CLEAR(ep->cursor);
    Py_CLEAR(ep->notifies);
    Py_CLEAR(ep->owed);
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
    ep->cursor = Py_NewRef(value);
    return 0;
}

static PyObject *
ep_get_notifies(Endpoint *ep, void *closure)
{
    return Py_NewRef(ep->notifies == NULL ? Py_None : ep->notifies);
}

static int
ep_set_notifies(Endpoint *ep, PyObject *value, void *closure)
{
    if (value == NULL || !PyObject_TypeCheck(value, EventCountType)) {
        PyErr_Format(PyExc_TypeError, "an endpoint notifies an EventCount, got %R", value);
        return -1;
    }
    Py_XSETREF(ep->notifies, Py_NewRef(value));
    return 0;
}

static PyGetSetDef ep_getset[] = {
    {"cursor", (getter)ep_get_cursor, (setter)ep_set_cursor, "the side's ring cursor (set once)", NULL},
    {"notifies", (getter)ep_get_notifies, (setter)ep_set_notifies, "the eventcount the other side parks on", NULL},
    {NULL},
};

static PyMethodDef wep_methods[] = {
    {"publish", (PyCFunction)(void (*)(void))wep_publish, METH_FASTCALL | METH_KEYWORDS,
     "publish($self, /, parts, timeout=None, overflow=None, *, split_payload=False, unpublished=None)\n--\n\n"
     "Broadcast one message: claim a chunk (waiting at most timeout seconds), write parts (bytes-like objects, back to "
     "back) into it, send overflow (a list of frames, or None) on the overflow channel, publish, wake parked readers. "
     "If an exception ends it before anything of the message left the process, the message is dropped and "
     "unpublished() runs (if given) before the exception propagates; after that it is finished first. "
     "split_payload writes parts[0] alone first (a torn chunk: the spec's TwoStepPayload). See ringcast.endpoint."},
    {"claim", (PyCFunction)(void (*)(void))wep_claim, METH_FASTCALL | METH_KEYWORDS, "claim($self, /, timeout=None)\n--\n\nWriterClaim until the chunk is free: one look, then spin and park."},
    {"_claim_message", (PyCFunction)wep_claim_message, METH_O,
     "_claim_message(timeout): finish what is owed, claim, WriterClearWritten; the chunk."},
    {"_clear_flags_and_publish", (PyCFunction)wep_clear_flags_and_publish, METH_NOARGS,
     "F7; WriterClearReadFlag for each live reader; WriterPublish."},
    {NULL},
};

static PyMemberDef wep_members[] = {
    {"owed", T_OBJECT, offsetof(Endpoint, owed), 0, "the chunk whose message an exception must not drop (its overflow payload was sent, or a read flag cleared)"},
    {"wake_owed", T_BOOL, offsetof(Endpoint, wake_owed), 0, "a published message whose NotifyLoadWaiters/NotifyWake an exception cut short"},
    {NULL},
};

static PyType_Slot wep_slots[] = {
    {Py_tp_doc, "The writer's per-message sequence; ringcast.endpoint.WriterEndpoint subclasses it."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, ep_dealloc},
    {Py_tp_traverse, ep_traverse},
    {Py_tp_clear, ep_tp_clear},
    {Py_tp_methods, wep_methods},
    {Py_tp_getset, ep_getset},
    {Py_tp_members, wep_members},
    {0, NULL},
};

static PyType_Spec wep_spec = {"ringcast._protocol._WriterEndpoint", sizeof(Endpoint), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, wep_slots};

static PyMethodDef rep_methods[] = {
    {"receive", (PyCFunction)(void (*)(void))rep_receive, METH_FASTCALL | METH_KEYWORDS,
     "receive($self, /, copy_out, timeout=None, deadline=None)\n--\n\n"
     "Receive the next message, as (kept, None) or (None, frames): copy_out(view) runs on the chunk's memoryview and returns what to keep (it must copy; "
     "the view is released when it returns), or OVERFLOW for a marker chunk, whose payload then comes from the "
     "overflow channel before deadline (time.monotonic() seconds). The chunk is acked and the writer woken also when "
     "copy_out raised. timeout bounds the wait for the chunk. See ringcast.endpoint."},
    {"ready", (PyCFunction)rep_ready, METH_NOARGS, "ReaderLoadWritten, ReaderLoadReadFlag, F4: is the chunk ours to read?"},
    {"wait_ready", (PyCFunction)(void (*)(void))rep_wait_ready, METH_FASTCALL | METH_KEYWORDS, "wait_ready($self, /, timeout=None)\n--\n\nLook until ready(): one look, then spin and park."},
    {NULL},
};

static PyMemberDef rep_members[] = {
    {"owed", T_BOOL, offsetof(Endpoint, owed_payload), 0, "a marker was acked but its payload not yet received"},
    {NULL},
};

static PyType_Slot rep_slots[] = {
    {Py_tp_doc, "A reader's per-message sequence; ringcast.endpoint.ReaderEndpoint subclasses it."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, ep_dealloc},
    {Py_tp_traverse, ep_traverse},
    {Py_tp_clear, ep_tp_clear},
    {Py_tp_methods, rep_methods},
    {Py_tp_getset, ep_getset},
    {Py_tp_members, rep_members},
    {0, NULL},
};

static PyType_Spec rep_spec = {"ringcast._protocol._ReaderEndpoint", sizeof(Endpoint), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, rep_slots};
