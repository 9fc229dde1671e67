/* _protocol_ring.c: the cursor types (ringcast.ring's RingWriter / RingReader subclass them),
 * part of the ringcast._protocol binding (included by _protocol.c). Their methods are single
 * steps of the core (rc_step: one spec action each, its tracepoint included), for tests, tools
 * and diagnostics; a message's sequence is the endpoints' (the core's entry points). */

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
    p->parts = (rc_parts){(size_t)p->n, p->bufs, p->lens};
    return 0;
}

/* ------------------------------------------------------------------------------- steps -- */

static PyObject *
one_step(Cursor *c, rc_action action, int arg, int as_bool)
{
    long out = 0;
    if (c->offs == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this ring cursor was never initialised: build it from a ring");
        return NULL;
    }
    if (rc_step(&c->st.s, action, arg, &out) != RC_OK)
        return NULL;
    if (as_bool < 0)
        Py_RETURN_NONE;
    return as_bool ? PyBool_FromLong(out) : PyLong_FromLong(out);
}

static int
reader_arg(PyObject *arg, Cursor *c)
{
    long r = PyLong_AsLong(arg);
    if (r == -1 && PyErr_Occurred())
        return -1;
    if (r < 0 || r >= (long)c->layout.n_reader) {
        PyErr_Format(PyExc_IndexError, "reader %ld out of range for n_reader=%u", r, c->layout.n_reader);
        return -1;
    }
    return (int)r;
}

static int
writer_init(Cursor *c, PyObject *args, PyObject *kw)
{
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "_WriterSteps takes positional arguments only");
        return -1;
    }
    if (cursor_init(c, args) < 0)
        return -1;
    rc_writer_init(&c->st.w, &c->layout, &c->io, &c->policy, &c->counters, NULL, c->live, c->liveness);
    return 0;
}

/* Spec: WriterClaim (the core's step, through rc_step) */
static PyObject *
py_writer_claim(Cursor *c, PyObject *unused)
{
    return one_step(c, RC_WriterClaim, 0, 1);
}

static PyObject *
py_writer_clear_written(Cursor *c, PyObject *unused)
{
    return one_step(c, RC_WriterClearWritten, 0, -1);
}

static PyObject *
py_writer_write_payload(Cursor *c, PyObject *seq)
{
    Parts p;
    size_t written = 0;
    if (c->offs == NULL)
        return one_step(c, RC_WriterWritePayload, 0, -1); /* says so */
    if (parts_get(&p, seq) < 0)
        return NULL;
    c->nparts = p.n;
    int rc = rc_step_payload(&c->st.w, &p.parts, &written);
    parts_release(&p);
    return rc == RC_OK ? PyLong_FromSize_t(written) : NULL;
}

static PyObject *
py_writer_clear_read_flag(Cursor *c, PyObject *arg)
{
    int r = reader_arg(arg, c);
    return r < 0 ? NULL : one_step(c, RC_WriterClearReadFlag, r, -1);
}

static PyObject *
py_writer_publish(Cursor *c, PyObject *unused)
{
    return one_step(c, RC_WriterPublish, 0, -1);
}

static PyObject *
py_writer_evict(Cursor *c, PyObject *arg)
{
    int r = reader_arg(arg, c);
    return r < 0 ? NULL : one_step(c, RC_WriterEvict, r, -1);
}

static PyObject *
writer_get_live_readers(Cursor *c, void *closure)
{
    PyObject *out = PyList_New(0);
    for (uint32_t r = 0; out != NULL && r < c->layout.n_reader; r++) {
        if (!c->live[r])
            continue;
        PyObject *v = PyLong_FromUnsignedLong(r);
        if (v == NULL || PyList_Append(out, v) < 0)
            Py_CLEAR(out);
        Py_XDECREF(v);
    }
    return out;
}

static PyMethodDef writer_methods[] = {
    {"_writer_claim", (PyCFunction)py_writer_claim, METH_NOARGS, "Spec: WriterClaim. Is the chunk at the cursor free?"},
    {"_writer_clear_written", (PyCFunction)py_writer_clear_written, METH_NOARGS, "Spec: WriterClearWritten."},
    {"_writer_write_payload", (PyCFunction)py_writer_write_payload, METH_O,
     "Spec: WriterWritePayload. Store the parts back to back from the chunk's start; return the bytes written."},
    {"_writer_clear_read_flag", (PyCFunction)py_writer_clear_read_flag, METH_O, "Spec: WriterClearReadFlag(r)."},
    {"_writer_publish", (PyCFunction)py_writer_publish, METH_NOARGS, "Spec: WriterPublish (F3; written := 1; the cursor moves on)."},
    {"_writer_evict", (PyCFunction)py_writer_evict, METH_O, "Spec: WriterEvict(r)."},
    {NULL},
};

static PyGetSetDef writer_getset[] = {
    {"index", (getter)cursor_get_index, (setter)cursor_set_index, "the chunk the writer writes next", NULL},
    {"live_readers", (getter)writer_get_live_readers, NULL,
     "the readers whose read flags the writer clears for each message (every reader not evicted)", NULL},
    {NULL},
};

static PyType_Slot writer_slots[] = {
    {Py_tp_doc, "The writer's steps (spec/Ring.tla); ringcast.ring.RingWriter builds it from a ring."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, writer_init},
    {Py_tp_dealloc, cursor_dealloc},
    {Py_tp_traverse, cursor_traverse},
    {Py_tp_clear, cursor_tp_clear},
    {Py_tp_methods, writer_methods},
    {Py_tp_getset, writer_getset},
    {0, NULL},
};

static PyType_Spec writer_spec = {"ringcast._protocol._WriterSteps", sizeof(Cursor), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, writer_slots};

/* -- a reader -- */

/* _ReaderSteps(buf, metas, datas, states, max_chunk_bytes, words, r) */
static int
reader_init(Cursor *c, PyObject *args, PyObject *kw)
{
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "_ReaderSteps takes positional arguments only");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n != 7) {
        PyErr_Format(PyExc_TypeError, "_ReaderSteps(buf, metas, datas, states, max_chunk_bytes, words, r): %zd arguments", n);
        return -1;
    }
    PyObject *head = PyTuple_GetSlice(args, 0, 6);
    if (head == NULL)
        return -1;
    int rc = cursor_init(c, head);
    Py_DECREF(head);
    int r = rc < 0 ? -1 : reader_arg(PyTuple_GET_ITEM(args, 6), c);
    if (r < 0)
        return -1;
    rc_reader_init(&c->st.r, (uint32_t)r, &c->layout, &c->io, &c->policy, &c->counters, NULL);
    c->side = PyLong_FromLong(r);
    c->mv = c->side ? PyMemoryView_FromObject(c->buf) : NULL;
    if (c->mv == NULL)
        return -1;
    if ((c->slices = PyMem_Calloc(c->layout.max_chunks, sizeof(PyObject *))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t i = 0; i < c->layout.max_chunks; i++) {
        size_t lo_ = c->layout.datas[i];
        PyObject *lo = PyLong_FromSize_t(lo_), *hi = PyLong_FromSize_t(lo_ + c->layout.max_chunk_bytes);
        c->slices[i] = (lo && hi) ? PySlice_New(lo, hi, NULL) : NULL;
        Py_XDECREF(lo);
        Py_XDECREF(hi);
        if (c->slices[i] == NULL)
            return -1;
    }
    return 0;
}

/* The chunk at the cursor as a slice of the reader's view of the mapping (ReaderCopy's view) */
static PyObject *
chunk_view(Cursor *c)
{
    if (c->slices == NULL || c->mv == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this ring cursor was never initialised (or was cleared): build it from a ring");
        return NULL;
    }
    return PyObject_GetItem(c->mv, c->slices[c->st.s.index]);
}

static PyObject *
py_reader_load_written(Cursor *c, PyObject *unused)
{
    return one_step(c, RC_ReaderLoadWritten, 0, 0);
}

static PyObject *
py_reader_load_read_flag(Cursor *c, PyObject *unused)
{
    return one_step(c, RC_ReaderLoadReadFlag, 0, 0);
}

/* Spec: ReaderCopy. A memoryview of the chunk to copy from; the caller releases it. */
static PyObject *
py_reader_copy(Cursor *c, PyObject *unused)
{
    PyObject *r = one_step(c, RC_ReaderCopy, 0, -1);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    return chunk_view(c);
}

static PyObject *
py_reader_check_evicted(Cursor *c, PyObject *unused)
{
    return one_step(c, RC_ReaderCheckEvicted, 0, 1);
}

static PyObject *
py_reader_ack(Cursor *c, PyObject *unused)
{
    return one_step(c, RC_ReaderAck, 0, -1);
}

/* Drop the reader's view of the mapping (before the ring is closed); later copies raise. */
static PyObject *
reader_release(Cursor *c, PyObject *unused)
{
    if (c->mv == NULL)
        Py_RETURN_NONE;
    return PyObject_CallMethod(c->mv, "release", NULL);
}

static PyMethodDef reader_methods[] = {
    {"_reader_load_written", (PyCFunction)py_reader_load_written, METH_NOARGS, "Spec: ReaderLoadWritten."},
    {"_reader_load_read_flag", (PyCFunction)py_reader_load_read_flag, METH_NOARGS, "Spec: ReaderLoadReadFlag."},
    {"_reader_copy", (PyCFunction)py_reader_copy, METH_NOARGS, "Spec: ReaderCopy. A memoryview of the chunk to copy from."},
    {"_reader_check_evicted", (PyCFunction)py_reader_check_evicted, METH_NOARGS,
     "Spec, without a step point: ReaderCheckEvicted (F8 first). Has the writer evicted this reader?"},
    {"_reader_ack", (PyCFunction)py_reader_ack, METH_NOARGS, "Spec: ReaderAck (F5; read_r := 1; the cursor moves on)."},
    {"release", (PyCFunction)reader_release, METH_NOARGS, "Drop this cursor's view of the mapping."},
    {NULL},
};

static PyGetSetDef reader_getset[] = {
    {"index", (getter)cursor_get_index, (setter)cursor_set_index, "the chunk the reader reads next", NULL},
    {NULL},
};

static PyMemberDef reader_members[] = {
    {"r", T_UINT, offsetof(Cursor, st.r.r), READONLY, "this reader's index"},
    {NULL},
};

static PyType_Slot reader_slots[] = {
    {Py_tp_doc, "A reader's steps (spec/Ring.tla); ringcast.ring.RingReader builds it from a ring."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, reader_init},
    {Py_tp_dealloc, cursor_dealloc},
    {Py_tp_traverse, cursor_traverse},
    {Py_tp_clear, cursor_tp_clear},
    {Py_tp_methods, reader_methods},
    {Py_tp_getset, reader_getset},
    {Py_tp_members, reader_members},
    {0, NULL},
};

static PyType_Spec reader_spec = {"ringcast._protocol._ReaderSteps", sizeof(Cursor), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, reader_slots};

#ifdef RINGCAST_TEST_PLANTED
/* _plant(cursor, name): a planted bug of tests/stateful on this cursor's side (test build only) */
static PyObject *
plant(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *const names[] = {"none", "reversed", "scan_ahead", "skip", "early_ack", "lapped"};
    if (nargs != 2 || (!PyObject_TypeCheck(args[0], WriterStepsType) && !PyObject_TypeCheck(args[0], ReaderStepsType)))
        return PyErr_Format(PyExc_TypeError, "_plant(cursor, name)");
    for (int k = 0; k < (int)(sizeof names / sizeof names[0]); k++)
        if (PyUnicode_Check(args[1]) && (PyUnicode_CompareWithASCIIString(args[1], names[k]) == 0)) {
            ((Cursor *)args[0])->st.s.planted = k;
            Py_RETURN_NONE;
        }
    return PyErr_Format(PyExc_ValueError, "no planted bug %R", args[1]);
}
#endif
