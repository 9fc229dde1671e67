/* ringcast_lab._steps: single steps of the protocol core, for tests and tools (_steps.h has the
 * picture). WriterSteps / ReaderSteps: one side's steps, each the core's rc_step (or
 * rc_step_payload) on a Side of this extension, over a ring's mapping; EventCount
 * (_steps_wait.c); _plant. */
#include "_steps.h"

static PyTypeObject *WriterStepsType, *ReaderStepsType;

/* ------------------------------------------------------------ the interface: no observer -- */

static int
no_observer(void)
{
    PyErr_SetString(PyExc_RuntimeError, "single steps have no observer: overflow I/O and waits are an endpoint's");
    return RC_ERR_RAISED;
}

static int steps_probe(void *ctx, int who, double waited) { return no_observer(); }
static int steps_io(void *ctx) { return no_observer(); }
static int steps_copy_out(void *ctx, const uint8_t *data, size_t len) { return no_observer(); }
static int steps_report(void *ctx, int event, double value) { return no_observer(); }
static int steps_signal(void *ctx, int who) { return no_observer(); }

static void
steps_fail(void *ctx, rc_status code, double value)
{
    Steps *c = ctx;
    if (code == RC_ERR_CLOSED && PyErr_Occurred())
        return; /* the pin's error says it */
    saved_exc e;
    put_aside(&e);
    if (code == RC_ERR_TOO_BIG)
        too_big(c, value);
    else if (code == RC_ERR_STATE)
        PyErr_Format(PyExc_IndexError, "reader out of range for n_reader=%u, or a step of the other side", c->layout.n_reader);
    else
        PyErr_Format(PyExc_RuntimeError, "single step: error %d", (int)code);
    take_back(&e, 0);
}

/* Steps(ring[, r]): ring.offsets() is where the side finds its words */
static int
steps_init(Steps *c, PyObject *args, long r)
{
    PyObject *ring = PyTuple_GET_ITEM(args, 0), *where = PyObject_CallMethod(ring, "offsets", NULL);
    if (where == NULL)
        return -1;
    c->io = (rc_iface){.ctx = c, .pin = side_pin, .unpin = side_unpin, .now = real_now, .check_signals = side_check_signals,
                       .futex_wait = side_futex_wait, .futex_wake = side_futex_wake, .yield = side_yield,
                       .sleep = real_sleep, .probe = steps_probe, .send_overflow = steps_io, .recv_overflow = steps_io,
                       .copy_out = steps_copy_out, .report = steps_report, .fail = steps_fail,
                       .signal = steps_signal};
    int rc = side_build(c, where, r);
    Py_DECREF(where);
    return rc;
}

static int
writer_init(Steps *c, PyObject *args, PyObject *kw)
{
    if ((kw != NULL && PyDict_GET_SIZE(kw)) || PyTuple_GET_SIZE(args) != 1) {
        PyErr_SetString(PyExc_TypeError, "WriterSteps(ring)");
        return -1;
    }
    return steps_init(c, args, RC_WRITER);
}

static int
reader_init(Steps *c, PyObject *args, PyObject *kw)
{
    if ((kw != NULL && PyDict_GET_SIZE(kw)) || PyTuple_GET_SIZE(args) != 2) {
        PyErr_SetString(PyExc_TypeError, "ReaderSteps(ring, r)");
        return -1;
    }
    long r = PyLong_AsLong(PyTuple_GET_ITEM(args, 1));
    if (r == -1 && PyErr_Occurred())
        return -1;
    return steps_init(c, args, r < 0 ? LONG_MAX : r); /* -1 is the writer's: refused as out of range */
}

static void
steps_dealloc(Steps *c)
{
    PyTypeObject *tp = Py_TYPE(c);
    PyObject_GC_UnTrack(c);
    side_free(c);
    tp->tp_free((PyObject *)c);
    Py_DECREF(tp);
}

/* ------------------------------------------------------------------------------- steps -- */

static PyObject *
one_step(Steps *c, rc_action action, int arg, int as_bool)
{
    long out = 0;
    if (c->offs == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "these single steps were never initialised: build them from a ring");
        return NULL;
    }
    if (rc_step(&c->st.s, action, arg, &out) != RC_OK)
        return NULL;
    if (as_bool < 0)
        Py_RETURN_NONE;
    return as_bool ? PyBool_FromLong(out) : PyLong_FromLong(out);
}

static int
reader_arg(PyObject *arg, Steps *c)
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

#define STEP(fn, action, as_bool)                                                                    \
    static PyObject *fn(Steps *c, PyObject *unused) { return one_step(c, action, 0, as_bool); }
#define STEP_R(fn, action)                                                                           \
    static PyObject *fn(Steps *c, PyObject *arg)                                                     \
    {                                                                                                \
        int r = reader_arg(arg, c);                                                                  \
        return r < 0 ? NULL : one_step(c, action, r, -1);                                            \
    }

STEP(py_writer_claim, RC_WriterClaim, 1)
STEP(py_writer_clear_written, RC_WriterClearWritten, -1)
STEP(py_writer_publish, RC_WriterPublish, -1)
STEP_R(py_writer_clear_read_flag, RC_WriterClearReadFlag)
STEP_R(py_writer_evict, RC_WriterEvict)
STEP(py_reader_load_written, RC_ReaderLoadWritten, 0)
STEP(py_reader_load_read_flag, RC_ReaderLoadReadFlag, 0)
STEP(py_reader_check_evicted, RC_ReaderCheckEvicted, 1)
STEP(py_reader_ack, RC_ReaderAck, -1)
STEP(py_park_recheck, RC_ParkRecheck, 1)

static PyObject *
py_writer_write_payload(Steps *c, PyObject *seq)
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

/* Spec: ReaderCopy. A memoryview of the chunk to copy from; the caller releases it. */
static PyObject *
py_reader_copy(Steps *c, PyObject *unused)
{
    PyObject *r = one_step(c, RC_ReaderCopy, 0, -1);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    return chunk_view(c);
}

static PyObject *
py_reader_release(Steps *c, PyObject *unused)
{
    return c->mv == NULL ? Py_NewRef(Py_None) : PyObject_CallMethod(c->mv, "release", NULL);
}

static PyObject *
get_index(Steps *c, void *closure)
{
    return PyLong_FromSize_t(c->st.s.index);
}

/* Moving the index is not a step: only WriterPublish / ReaderAck do it, and tests. */
static int
set_index(Steps *c, PyObject *value, void *closure)
{
    Py_ssize_t i = value == NULL ? -1 : PyLong_AsSsize_t(value);
    if (i == -1 && (value == NULL || PyErr_Occurred())) {
        if (value == NULL)
            PyErr_SetString(PyExc_AttributeError, "the index cannot be deleted");
        return -1;
    }
    if (i < 0 || i >= (Py_ssize_t)c->layout.max_chunks) {
        PyErr_Format(PyExc_IndexError, "chunk index %zd out of range for max_chunks=%u", i, c->layout.max_chunks);
        return -1;
    }
    c->st.s.index = (size_t)i;
    return 0;
}

/* _plant(endpoint, name): a planted bug of tests/stateful in an endpoint of the planted test build */
static PyObject *
plant(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *const names[] = {"none", "reversed", "scan_ahead", "skip", "early_ack", "lapped"};
    PyTypeObject *t = nargs == 2 ? Py_TYPE(args[0]) : NULL;
    while (t != NULL && strcmp(t->tp_name, RC_WRITER_ENDPOINT) != 0 && strcmp(t->tp_name, RC_READER_ENDPOINT) != 0)
        t = t->tp_base;
    if (t == NULL || ((Side *)args[0])->offs == NULL)
        return PyErr_Format(PyExc_TypeError, "_plant(endpoint, name): a bound endpoint of ringcast._protocol");
    for (int k = 0; k < (int)(sizeof names / sizeof names[0]); k++)
        if (PyUnicode_Check(args[1]) && PyUnicode_CompareWithASCIIString(args[1], names[k]) == 0) {
            ((Side *)args[0])->st.s.planted = k;
            Py_RETURN_NONE;
        }
    return PyErr_Format(PyExc_ValueError, "no planted bug %R", args[1]);
}

static PyMethodDef writer_methods[] = {
    {"_writer_claim", (PyCFunction)py_writer_claim, METH_NOARGS, "Spec: WriterClaim. Is the chunk at the index free?"},
    {"_writer_clear_written", (PyCFunction)py_writer_clear_written, METH_NOARGS, "Spec: WriterClearWritten."},
    {"_writer_write_payload", (PyCFunction)py_writer_write_payload, METH_O,
     "Spec: WriterWritePayload. Store the parts back to back from the chunk's start; return the bytes written."},
    {"_writer_clear_read_flag", (PyCFunction)py_writer_clear_read_flag, METH_O, "Spec: WriterClearReadFlag(r)."},
    {"_writer_publish", (PyCFunction)py_writer_publish, METH_NOARGS, "Spec: WriterPublish (F3; written := 1; the index moves on)."},
    {"_writer_evict", (PyCFunction)py_writer_evict, METH_O, "Spec: WriterEvict(r)."},
    {"_park_recheck", (PyCFunction)py_park_recheck, METH_NOARGS, "Spec: ParkRecheck: its tracepoint, then the look."},
    {NULL},
};

static PyMethodDef reader_methods[] = {
    {"_reader_load_written", (PyCFunction)py_reader_load_written, METH_NOARGS, "Spec: ReaderLoadWritten."},
    {"_reader_load_read_flag", (PyCFunction)py_reader_load_read_flag, METH_NOARGS, "Spec: ReaderLoadReadFlag."},
    {"_reader_copy", (PyCFunction)py_reader_copy, METH_NOARGS, "Spec: ReaderCopy. A memoryview of the chunk to copy from."},
    {"_reader_check_evicted", (PyCFunction)py_reader_check_evicted, METH_NOARGS,
     "Spec, without a step point: ReaderCheckEvicted (F8 first). Has the writer evicted this reader?"},
    {"_reader_ack", (PyCFunction)py_reader_ack, METH_NOARGS, "Spec: ReaderAck (F5; read_r := 1; the index moves on)."},
    {"_park_recheck", (PyCFunction)py_park_recheck, METH_NOARGS, "Spec: ParkRecheck: its tracepoint, then the look."},
    {"release", (PyCFunction)py_reader_release, METH_NOARGS, "Drop this side's view of the mapping."},
    {NULL},
};

static PyGetSetDef steps_getset[] = {
    {"index", (getter)get_index, (setter)set_index, "the chunk the side is at (settable: not a step)", NULL},
    {NULL},
};

static PyMemberDef reader_members[] = {
    {"r", T_UINT, offsetof(Steps, st.r.r), READONLY, "this reader's index"},
    {NULL},
};

#define STEPS_SLOTS(init, methods)                                                                   \
    {Py_tp_new, PyType_GenericNew}, {Py_tp_init, init}, {Py_tp_dealloc, steps_dealloc},              \
        {Py_tp_traverse, side_traverse}, {Py_tp_clear, side_clear}, {Py_tp_methods, methods},        \
        {Py_tp_getset, steps_getset}

static PyType_Slot writer_slots[] = {
    {Py_tp_doc, "WriterSteps(ring): the writer's single steps (spec/Ring.tla), for tests and tools."},
    STEPS_SLOTS(writer_init, writer_methods), {0, NULL},
};
static PyType_Slot reader_slots[] = {
    {Py_tp_doc, "ReaderSteps(ring, r): reader r's single steps (spec/Ring.tla), for tests and tools."},
    STEPS_SLOTS(reader_init, reader_methods), {Py_tp_members, reader_members}, {0, NULL},
};
#define STEPS_SPEC(nm, sl)                                                                           \
    {.name = nm, .basicsize = sizeof(Steps), .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, .slots = sl}
static PyType_Spec writer_spec = STEPS_SPEC("ringcast_lab._steps.WriterSteps", writer_slots);
static PyType_Spec reader_spec = STEPS_SPEC("ringcast_lab._steps.ReaderSteps", reader_slots);

#include "_steps_wait.c"

static PyMethodDef module_methods[] = {
    {"_plant", (PyCFunction)(void (*)(void))plant, METH_FASTCALL,
     "_plant(endpoint, name): a planted bug of tests/stateful (an endpoint of the planted test build)."},
    {NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "ringcast_lab._steps",
                                    .m_doc = "Single steps of ringcast's protocol core, for tests and tools (see _steps.h).",
                                    .m_size = -1, .m_methods = module_methods};

PyMODINIT_FUNC
PyInit__steps(void)
{
    PyObject *steps = PyImport_ImportModule("ringcast.steps");
    get_step_hook = steps == NULL ? NULL : PyObject_GetAttrString(steps, "get_step_hook");
    Py_XDECREF(steps);
    if (get_step_hook == NULL || hook_names_init() < 0)
        return NULL;
    rc_step_hook = hook_trampoline; /* this copy of the core's tracepoints: the runtime's hook, whatever it is */
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    WriterStepsType = (PyTypeObject *)PyType_FromSpec(&writer_spec);
    ReaderStepsType = (PyTypeObject *)PyType_FromSpec(&reader_spec);
    EventCountType = (PyTypeObject *)PyType_FromSpec(&ec_spec);
    if (WriterStepsType == NULL || ReaderStepsType == NULL || EventCountType == NULL
        || PyModule_AddObjectRef(m, "WriterSteps", (PyObject *)WriterStepsType) < 0
        || PyModule_AddObjectRef(m, "ReaderSteps", (PyObject *)ReaderStepsType) < 0
        || PyModule_AddObjectRef(m, "EventCount", (PyObject *)EventCountType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
