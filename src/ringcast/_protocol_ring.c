/* _protocol_ring.c: the ring's steps (spec/Ring.tla's writer and reader actions), part of the
 * ringcast._protocol extension: included by _protocol.c, which has the tracepoint (trace), the
 * action names and the rules every step follows; the cursors are _protocol_cursor.c's. */

/* -- the writer -- */

static int
writer_init(Cursor *c, PyObject *args, PyObject *kw)
{
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "_WriterSteps takes positional arguments only");
        return -1;
    }
    if (cursor_init(c, args) < 0)
        return -1;
    c->live_readers = PyList_New(c->n_reader);
    if (c->live_readers == NULL)
        return -1;
    for (Py_ssize_t r = 0; r < c->n_reader; r++)
        PyList_SET_ITEM(c->live_readers, r, PyLong_FromSsize_t(r));
    return 0;
}

/* Spec: WriterClaim. Is the chunk at the cursor writable (0?..?) or read by every reader (11..1)? */
static PyObject *
writer_claim(Cursor *c, PyObject *unused)
{
    Py_buffer view;
    uint8_t *base = step_begin(c, s_WriterClaim, s_writer, Py_None, &view);
    if (base == NULL)
        return NULL;
    uint8_t *m = base + c->metas[c->index];
    int free_ = rc_load_u8(m) == 0;
    int all_read = 1;
    for (Py_ssize_t r = 0; r < c->n_reader; r++)
        all_read &= rc_load_u8(m + 1 + r) == 1; /* every flag is loaded, as the spec's claim does */
    rc_fence(); /* F1: no payload store before the loads that showed the chunk free */
    PyBuffer_Release(&view);
    return PyBool_FromLong(free_ || all_read);
}

/* Spec: WriterClearWritten. No fence: F7 orders this store before the read-flag clears. */
static PyObject *
writer_clear_written(Cursor *c, PyObject *unused)
{
    Py_buffer view;
    uint8_t *base = step_begin(c, s_WriterClearWritten, s_writer, Py_None, &view);
    if (base == NULL)
        return NULL;
    rc_store_u8(base + c->metas[c->index], 0);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* Spec: WriterWritePayload. Stores `parts` (bytes-like, C-contiguous) back to back from the start
 * of the chunk; returns the number of bytes written. Refuses parts that do not fit the chunk
 * before storing any. */
static PyObject *
writer_write_payload(Cursor *c, PyObject *parts)
{
    Py_buffer view;
    TRACE(s_WriterWritePayload, s_writer, c->index, Py_None);
    PyObject *fast = PySequence_Fast(parts, "the payload's parts must be a sequence of bytes-like objects");
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast), total = 0, k;
    Py_buffer stack[8], *pv = stack;
    if (n > 8 && (pv = PyMem_Calloc(n, sizeof(Py_buffer))) == NULL) {
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    for (k = 0; k < n; k++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, k), &pv[k], PyBUF_SIMPLE) < 0)
            goto fail;
        total += pv[k].len;
    }
    if (total > c->max_chunk_bytes) {
        PyErr_Format(PyExc_ValueError, "the payload's %zd parts are %zd bytes, more than the chunk's max_chunk_bytes=%zd",
                     n, total, c->max_chunk_bytes);
        goto fail;
    }
    uint8_t *base = acquire(c, &view);
    if (base == NULL)
        goto fail;
    uint8_t *d = base + c->datas[c->index];
    for (Py_ssize_t j = 0; j < n; j++) {
        memcpy(d, pv[j].buf, (size_t)pv[j].len);
        d += pv[j].len;
    }
    PyBuffer_Release(&view);
    for (Py_ssize_t j = 0; j < n; j++)
        PyBuffer_Release(&pv[j]);
    if (pv != stack)
        PyMem_Free(pv);
    Py_DECREF(fast);
    return PyLong_FromSsize_t(total);
fail:
    for (Py_ssize_t j = 0; j < k; j++)
        PyBuffer_Release(&pv[j]);
    if (pv != stack)
        PyMem_Free(pv);
    Py_DECREF(fast);
    return NULL;
}

/* Spec: WriterClearReadFlag */
static PyObject *
writer_clear_read_flag(Cursor *c, PyObject *arg)
{
    Py_buffer view;
    Py_ssize_t r;
    if (reader_arg(arg, c->n_reader, &r) == NULL)
        return NULL;
    uint8_t *base = step_begin(c, s_WriterClearReadFlag, s_writer, arg, &view);
    if (base == NULL)
        return NULL;
    rc_store_u8(base + c->metas[c->index] + 1 + r, 0);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* Spec: WriterPublish. written := 1; the cursor moves on by one. */
static PyObject *
writer_publish(Cursor *c, PyObject *unused)
{
    Py_buffer view;
    uint8_t *base = step_begin(c, s_WriterPublish, s_writer, Py_None, &view);
    if (base == NULL)
        return NULL;
    rc_fence(); /* F3: payload and cleared flags visible before the publication */
    rc_store_u8(base + c->metas[c->index], 1);
    PyBuffer_Release(&view);
    c->index = c->index + 1 == c->max_chunks ? 0 : c->index + 1;
    Py_RETURN_NONE;
}

/* Spec: WriterEvict. Reader r is dead: mark it evicted in the reader table, set its read flag in
 * every chunk (no chunk waits for it) and never clear its flag again (live_readers). Only the
 * writer calls this, between messages (spec: evict_correct; evict_keeps_clearing shows why the
 * flag must stay set). */
static PyObject *
writer_evict(Cursor *c, PyObject *arg)
{
    Py_buffer view;
    Py_ssize_t r;
    if (reader_arg(arg, c->n_reader, &r) == NULL)
        return NULL;
    uint8_t *base = step_begin(c, s_WriterEvict, s_writer, arg, &view);
    if (base == NULL)
        return NULL;
    uint32_t evicted = READER_EVICTED; /* the state word, little-endian like its readers expect */
    uint8_t le[4] = {(uint8_t)evicted, (uint8_t)(evicted >> 8), (uint8_t)(evicted >> 16), (uint8_t)(evicted >> 24)};
    for (int b = 0; b < 4; b++)
        rc_store_u8(base + c->states[r] + b, le[b]);
    for (Py_ssize_t i = 0; i < c->max_chunks; i++)
        rc_store_u8(base + c->metas[i] + 1 + r, 1);
    PyBuffer_Release(&view);
    Py_ssize_t n = PyList_GET_SIZE(c->live_readers);
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t q = PyLong_AsSsize_t(PyList_GET_ITEM(c->live_readers, k));
        if (q == -1 && PyErr_Occurred())
            return NULL;
        if (q == r)
            return PySequence_DelItem(c->live_readers, k) < 0 ? NULL : Py_NewRef(Py_None);
    }
    Py_RETURN_NONE;
}

static PyMethodDef writer_methods[] = {
    {"_writer_claim", (PyCFunction)writer_claim, METH_NOARGS, "Spec: WriterClaim. Is the chunk at the cursor free?"},
    {"_writer_clear_written", (PyCFunction)writer_clear_written, METH_NOARGS, "Spec: WriterClearWritten."},
    {"_writer_write_payload", (PyCFunction)writer_write_payload, METH_O,
     "Spec: WriterWritePayload. Store the parts back to back from the chunk's start; return the bytes written."},
    {"_writer_clear_read_flag", (PyCFunction)writer_clear_read_flag, METH_O, "Spec: WriterClearReadFlag(r)."},
    {"_writer_publish", (PyCFunction)writer_publish, METH_NOARGS, "Spec: WriterPublish (F3; written := 1; the cursor moves on)."},
    {"_writer_evict", (PyCFunction)writer_evict, METH_O, "Spec: WriterEvict(r)."},
    {NULL},
};

static PyGetSetDef writer_getset[] = {
    {"index", (getter)cursor_get_index, (setter)cursor_set_index, "the chunk the writer writes next", NULL},
    {NULL},
};

static PyMemberDef writer_members[] = {
    {"live_readers", T_OBJECT, offsetof(Cursor, live_readers), READONLY,
     "the readers whose read flags the writer clears for each message (every reader not evicted)"},
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
    {Py_tp_members, writer_members},
    {0, NULL},
};

static PyType_Spec writer_spec = {"ringcast._protocol._WriterSteps", sizeof(Cursor), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, writer_slots};

/* -- a reader -- */

/* _ReaderSteps(buf, metas, datas, states, max_chunk_bytes, r) */
static int
reader_init(Cursor *c, PyObject *args, PyObject *kw)
{
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "_ReaderSteps takes positional arguments only");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n != 6) {
        PyErr_Format(PyExc_TypeError, "_ReaderSteps(buf, metas, datas, states, max_chunk_bytes, r): %zd arguments", n);
        return -1;
    }
    PyObject *head = PyTuple_GetSlice(args, 0, 5);
    if (head == NULL)
        return -1;
    int rc = cursor_init(c, head);
    Py_DECREF(head);
    if (rc < 0)
        return -1;
    if (reader_arg(PyTuple_GET_ITEM(args, 5), c->n_reader, &c->r) == NULL)
        return -1;
    c->side = PyLong_FromSsize_t(c->r);
    c->mv = c->side ? PyMemoryView_FromObject(c->buf) : NULL;
    if (c->mv == NULL)
        return -1;
    c->slices = PyMem_Calloc(c->max_chunks, sizeof(PyObject *));
    if (c->slices == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < c->max_chunks; i++) {
        PyObject *lo = PyLong_FromSsize_t(c->datas[i]), *hi = PyLong_FromSsize_t(c->datas[i] + c->max_chunk_bytes);
        c->slices[i] = (lo && hi) ? PySlice_New(lo, hi, NULL) : NULL;
        Py_XDECREF(lo);
        Py_XDECREF(hi);
        if (c->slices[i] == NULL)
            return -1;
    }
    return 0;
}

static PyObject *
reader_load(Cursor *c, PyObject *action, Py_ssize_t extra)
{
    Py_buffer view;
    uint8_t *base = step_begin(c, action, c->side, Py_None, &view);
    if (base == NULL)
        return NULL;
    uint8_t v = rc_load_u8(base + c->metas[c->index] + extra);
    PyBuffer_Release(&view);
    return PyLong_FromLong(v);
}

/* Spec: ReaderLoadWritten */
static PyObject *
reader_load_written(Cursor *c, PyObject *unused)
{
    return reader_load(c, s_ReaderLoadWritten, 0);
}

/* Spec: ReaderLoadReadFlag */
static PyObject *
reader_load_read_flag(Cursor *c, PyObject *unused)
{
    return reader_load(c, s_ReaderLoadReadFlag, 1 + c->r);
}

/* Spec: ReaderCopy. A memoryview of the chunk to read from (a slice of the reader's view of the
 * mapping); the caller copies out what it needs and releases it. */
static PyObject *
reader_copy(Cursor *c, PyObject *unused)
{
    if (c->slices == NULL || c->mv == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this ring cursor was never initialised (or was cleared): build it from a ring");
        return NULL;
    }
    TRACE(s_ReaderCopy, c->side, c->index, Py_None);
    return PyObject_GetItem(c->mv, c->slices[c->index]);
}

/* Spec, without a step point: ReaderCheckEvicted (EvictCheck). After the copy, before it is
 * returned (and acked): whether the writer evicted this reader. A live reader wrongly judged dead
 * (another PID namespace) may have copied a chunk the writer refilled after evicting it: the copy
 * must then be dropped (spec: evict_park_false_suspect fails InOrder without this check,
 * _check passes). No step point: the harness's models have no eviction, where this load always
 * says False and commutes with every other step (docs/spec.md, "Eviction while the writer
 * parks"). */
static PyObject *
reader_check_evicted(Cursor *c, PyObject *unused)
{
    Py_buffer view;
    uint8_t *base = acquire(c, &view);
    if (base == NULL)
        return NULL;
    uint8_t v = rc_load_u8(base + c->states[c->r]); /* the state word's low byte (little-endian) */
    PyBuffer_Release(&view);
    return PyBool_FromLong(v == READER_EVICTED);
}

/* Spec: ReaderAck. read_r := 1; the cursor moves on by one. */
static PyObject *
reader_ack(Cursor *c, PyObject *unused)
{
    Py_buffer view;
    uint8_t *base = step_begin(c, s_ReaderAck, c->side, Py_None, &view);
    if (base == NULL)
        return NULL;
    rc_fence(); /* F5: the copy is complete before the writer may reuse the chunk */
    rc_store_u8(base + c->metas[c->index] + 1 + c->r, 1);
    PyBuffer_Release(&view);
    c->index = c->index + 1 == c->max_chunks ? 0 : c->index + 1;
    Py_RETURN_NONE;
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
    {"_reader_load_written", (PyCFunction)reader_load_written, METH_NOARGS, "Spec: ReaderLoadWritten."},
    {"_reader_load_read_flag", (PyCFunction)reader_load_read_flag, METH_NOARGS, "Spec: ReaderLoadReadFlag."},
    {"_reader_copy", (PyCFunction)reader_copy, METH_NOARGS, "Spec: ReaderCopy. A memoryview of the chunk to copy from."},
    {"_reader_check_evicted", (PyCFunction)reader_check_evicted, METH_NOARGS,
     "Spec, without a step point: ReaderCheckEvicted. Has the writer evicted this reader?"},
    {"_reader_ack", (PyCFunction)reader_ack, METH_NOARGS, "Spec: ReaderAck (F5; read_r := 1; the cursor moves on)."},
    {"release", (PyCFunction)reader_release, METH_NOARGS, "Drop this cursor's view of the mapping."},
    {NULL},
};

static PyGetSetDef reader_getset[] = {
    {"index", (getter)cursor_get_index, (setter)cursor_set_index, "the chunk the reader reads next", NULL},
    {NULL},
};

static PyMemberDef reader_members[] = {
    {"r", T_PYSSIZET, offsetof(Cursor, r), READONLY, "this reader's index"},
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
