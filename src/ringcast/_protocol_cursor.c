/* _protocol_cursor.c: what the ring's two cursor types share (the mapping, the chunk offsets,
 * the cursor, their lifetime), part of the ringcast._protocol extension: included by _protocol.c
 * before _protocol_ring.c, which has the steps. */

/* A cursor: the writer's (_WriterSteps) or reader r's (_ReaderSteps); the fields of the other
 * side stay NULL. */
typedef struct {
    PyObject_HEAD
    PyObject *buf;        /* the segment's mmap object */
    Py_ssize_t index;     /* the chunk this side is at (writes / reads next) */
    Py_ssize_t n_reader, max_chunks, max_chunk_bytes;
    Py_ssize_t min_len;   /* the mapping's bytes the offsets below reach */
    Py_ssize_t *metas;    /* chunk i's written flag; reader r's read flag at metas[i] + 1 + r */
    Py_ssize_t *datas;    /* chunk i's data */
    Py_ssize_t *states;   /* reader r's state word (its low byte: 1 evicted) */
    /* the writer's */
    PyObject *live_readers; /* list of the readers whose flags the writer clears (not evicted) */
    /* a reader's */
    Py_ssize_t r;
    PyObject *side;     /* r as an int, for the hook */
    PyObject *mv;       /* memoryview of the mapping: ReaderCopy's views are its slices */
    PyObject **slices;  /* chunk i's data slice */
} Cursor;

static uint8_t *
acquire(Cursor *c, Py_buffer *view)
{
    if (c->buf == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this ring cursor was never initialised (or was cleared): build it from a ring");
        return NULL;
    }
    if (PyObject_GetBuffer(c->buf, view, PyBUF_WRITABLE) < 0)
        return NULL;
    if (view->len < c->min_len) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "the ring's mapping is %zd bytes, its layout needs %zd", view->len, c->min_len);
        return NULL;
    }
    return (uint8_t *)view->buf;
}

/* How every step on the ring starts: its tracepoint (the hook, if set, with the side, the chunk the
 * cursor is at and the reader acted on), then the mapping's bytes for its access. NULL with an
 * exception set when the hook raised (the step has not happened) or the ring is closed; else
 * the step releases `view` after its access. */
static uint8_t *
step_begin(Cursor *c, PyObject *action, PyObject *side, PyObject *reader, Py_buffer *view)
{
    if (c->buf == NULL) /* never initialised (a reader's side is not set either): acquire says so */
        return acquire(c, view);
    if (trace(action, side, c->index, reader) < 0)
        return NULL;
    return acquire(c, view);
}

static Py_ssize_t *
offsets(PyObject *seq, Py_ssize_t n, const char *what)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL)
        return NULL;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        PyErr_Format(PyExc_ValueError, "%s: %zd offsets, expected %zd", what, PySequence_Fast_GET_SIZE(fast), n);
        Py_DECREF(fast);
        return NULL;
    }
    Py_ssize_t *out = PyMem_Calloc(n ? n : 1, sizeof(Py_ssize_t));
    if (out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] < 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "%s: offset %zd is negative", what, out[i]);
            PyMem_Free(out);
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast);
    return out;
}

/* Cursor(buf, metas, datas, states, max_chunk_bytes): the offsets come from ringcast.layout. */
static int
cursor_init(Cursor *c, PyObject *args)
{
    PyObject *buf, *metas, *datas, *states;
    Py_ssize_t mcb;
    if (!PyArg_ParseTuple(args, "OOOOn", &buf, &metas, &datas, &states, &mcb))
        return -1;
    if (c->metas != NULL) {
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
    c->metas = offsets(metas, max_chunks, "metas");
    c->datas = c->metas ? offsets(datas, max_chunks, "datas") : NULL;
    c->states = c->datas ? offsets(states, n_reader, "states") : NULL;
    if (c->states == NULL)
        return -1;
    c->max_chunks = max_chunks;
    c->n_reader = n_reader;
    c->max_chunk_bytes = mcb;
    c->min_len = 0;
    for (Py_ssize_t i = 0; i < max_chunks; i++) {
        if (c->metas[i] + 1 + n_reader > c->min_len)
            c->min_len = c->metas[i] + 1 + n_reader;
        if (c->datas[i] + mcb > c->min_len)
            c->min_len = c->datas[i] + mcb;
    }
    for (Py_ssize_t r = 0; r < n_reader; r++)
        if (c->states[r] + 1 > c->min_len)
            c->min_len = c->states[r] + 1;
    Py_INCREF(buf);
    c->buf = buf;
    c->index = 0;
    Py_buffer view;
    if (acquire(c, &view) == NULL)
        return -1;
    PyBuffer_Release(&view);
    return 0;
}

static int
cursor_traverse(Cursor *c, visitproc visit, void *arg)
{
    Py_VISIT(c->buf);
    Py_VISIT(c->live_readers);
    Py_VISIT(c->mv);
    Py_VISIT(Py_TYPE(c));
    return 0;
}

static int
cursor_tp_clear(Cursor *c)
{
    Py_CLEAR(c->live_readers);
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
        for (Py_ssize_t i = 0; i < c->max_chunks; i++)
            Py_XDECREF(c->slices[i]);
    PyMem_Free(c->slices);
    Py_CLEAR(c->side);
    PyMem_Free(c->metas);
    PyMem_Free(c->datas);
    PyMem_Free(c->states);
    tp->tp_free((PyObject *)c);
    Py_DECREF(tp);
}

static PyObject *
cursor_get_index(Cursor *c, void *closure)
{
    return PyLong_FromSsize_t(c->index);
}

/* Moving a cursor is not a step: only the planted-bug variants do it, and WriterPublish/ReaderAck. */
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
    if (i < 0 || i >= c->max_chunks) {
        PyErr_Format(PyExc_IndexError, "chunk index %zd out of range for max_chunks=%zd", i, c->max_chunks);
        return -1;
    }
    c->index = i;
    return 0;
}

static PyObject *
reader_arg(PyObject *arg, Py_ssize_t n_reader, Py_ssize_t *r)
{
    *r = PyLong_AsSsize_t(arg);
    if (*r == -1 && PyErr_Occurred())
        return NULL;
    if (*r < 0 || *r >= n_reader) {
        PyErr_Format(PyExc_IndexError, "reader %zd out of range for n_reader=%zd", *r, n_reader);
        return NULL;
    }
    return arg;
}
