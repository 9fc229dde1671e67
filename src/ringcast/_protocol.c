/* ringcast._protocol: the ring's and the eventcount's atomic steps, one C function per action of
 * spec/Ring.tla, each with the step hook as its tracepoint.
 *
 * This is the one copy of these steps. ringcast.ring subclasses the two cursor types
 * (RingWriter, RingReader: construction from a ShmRingBuffer, diagnostics) and ringcast.waiting
 * re-exports EventCount; ringcast.endpoint's classes subclass the endpoint types, whose
 * per-message sequence (_protocol_endpoint.c) orders the steps and is the only C code that calls
 * them (in Python only ringcast.endpoint does: write_chunk, read_chunk, evict_dead; and
 * ringcast.waiting's park loop the eventcount's park steps). Each
 * function below is tagged with its spec action (`Spec: WriterClaim`) and does, in order:
 *
 *   1. the tracepoint: if a step hook is set, call hook(action, side, index, reader)
 *      (side "writer" or the reader index, index the chunk the side is at, reader the reader a
 *      writer action acts on, else None). The hook may raise (the stateful harness stops a
 *      process there; the reliability tests kill it there): the step then has not happened.
 *      The hook lives here, once: ringcast.steps.hook reads and writes it (get_hook,
 *      set_hook), for the Python steps too. In production a tracepoint costs one NULL test.
 *   2. the shared-memory access, on the segment's raw bytes. A cursor holds the mapping (the
 *      mmap object) and takes a buffer of it for the duration of the access, so a step on a
 *      closed ring raises ValueError instead of touching unmapped memory.
 *
 * Fences (ringcast_fences.h; which are needed is what TLC shows, docs/spec.md "Fence table"):
 * F1 in WriterClaim, F3 in WriterPublish, F5 in ReaderAck, F6W in ParkAnnounce, F6N in
 * NotifyLoadWaiters. F7 and F4 sit between two steps: the endpoints' sequence has them
 * (_protocol_endpoint.c: _clear_flags_and_publish, ready). tests/test_arm_codegen.py reads the
 * `F<n>` comments of this translation unit (the files included below) and checks that each such
 * function has a full barrier in its AArch64 code.
 *
 * The flag bytes are loaded and stored single-copy atomically without ordering of their own
 * (rc_load_u8 / rc_store_u8): the spec's relaxed model, in which only the fences order them.
 *
 * Python subclasses may override any step (tests/stateful/variants.py, the planted bugs): the
 * endpoints' sequence calls an override by name instead of the C function. EventCount.notify,
 * the one method here that runs two steps, calls a subclass's override the same way
 * (tests/test_waiting.py's dropped wake-up).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <sched.h>
#include <string.h>
#include "ringcast_fences.h"

#define READER_EVICTED 1 /* ringcast.layout.READER_EVICTED: the state word's low byte */
#define WAKE_ALL 0x7FFFFFFF

static PyObject *hook;  /* the step hook, or NULL (set_hook, called by ringcast.steps.set_step_hook) */
static PyObject *s_writer;
static PyObject *s_WriterClaim, *s_WriterClearWritten, *s_WriterWritePayload, *s_WriterClearReadFlag,
    *s_WriterPublish, *s_WriterEvict, *s_ReaderLoadWritten, *s_ReaderLoadReadFlag, *s_ReaderCopy,
    *s_ReaderAck, *s_ParkSnapshot, *s_ParkAnnounce, *s_ParkSleep, *s_ParkRetire, *s_NotifyLoadWaiters,
    *s_NotifyWake, *s_notify_load_waiters_m, *s_notify_wake_m, *s_parks, *s_wakeups, *s_spins;

/* The tracepoint: 0 to go on, -1 with an exception set (the hook raised).
 * Test-only switch: -DRINGCAST_NO_TRACEPOINTS compiles every tracepoint out (the comparison build
 * of tests/stateful/bench_hook.py, which measures what they cost in production; setup.py never
 * passes it, and the module says so in TRACEPOINTS). */
#ifdef RINGCAST_NO_TRACEPOINTS
#define RC_TRACEPOINTS 0
static inline int
trace(PyObject *action, PyObject *side, Py_ssize_t index, PyObject *reader)
{
    return 0;
}
#else
#define RC_TRACEPOINTS 1
static int
trace(PyObject *action, PyObject *side, Py_ssize_t index, PyObject *reader)
{
    PyObject *h = hook;
    if (h == NULL)
        return 0;
    Py_INCREF(h); /* the hook may replace itself */
    PyObject *idx = PyLong_FromSsize_t(index);
    if (idx == NULL) {
        Py_DECREF(h);
        return -1;
    }
    PyObject *args[4] = {action, side, idx, reader};
    PyObject *res = PyObject_Vectorcall(h, args, 4, NULL);
    Py_DECREF(idx);
    Py_DECREF(h);
    if (res == NULL)
        return -1;
    Py_DECREF(res);
    return 0;
}
#endif

#define TRACE(action, side, index, reader)                                                           \
    do {                                                                                             \
        if (trace((action), (side), (index), (reader)) < 0)                                          \
            return NULL;                                                                             \
    } while (0)

/* ------------------------------------------------------- helpers of the endpoints' sequence -- */

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

/* Fastcall arguments by position (the first npos of `names`) or keyword, into out[] (NULL: not
 * given); the first nreq are required. */
static int
parse(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **names,
      Py_ssize_t n, Py_ssize_t npos, Py_ssize_t nreq, PyObject **out)
{
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError, "%s takes at most %zd positional arguments (%zd given)", fname, npos, nargs);
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++)
        out[k] = k < nargs ? args[k] : NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t j = 0; j < nkw; j++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, j);
        Py_ssize_t k = 0;
        while (k < n && PyUnicode_Compare(key, names[k]) != 0)
            k++;
        if (k == n || out[k] != NULL) {
            PyErr_Format(PyExc_TypeError, k == n ? "%s got an unexpected keyword argument %R" : "%s got multiple values for %R",
                         fname, key);
            return -1;
        }
        out[k] = args[nargs + j];
    }
    for (Py_ssize_t k = 0; k < nreq; k++)
        if (out[k] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s missing required argument %R", fname, names[k]);
            return -1;
        }
    return 0;
}

/* The cursors, the steps and the endpoints' sequence, in four files of this one extension (a
 * unity build: they share the tracepoint, the action names and the hook, and compile as one
 * translation unit). */
#include "_protocol_cursor.c"
#include "_protocol_ring.c"
#include "_protocol_wait.c"
#include "_protocol_endpoint.c"

/* --------------------------------------------------------------------------------- the module -- */

/* set_hook(fn or None) / get_hook(): the one step hook (ringcast.steps.hook is a view of it) */
static PyObject *
set_hook(PyObject *self, PyObject *fn)
{
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "a step hook must be callable or None, got %R", fn);
        return NULL;
    }
    PyObject *old = hook;
    hook = fn == Py_None ? NULL : Py_NewRef(fn);
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

static PyObject *
get_hook(PyObject *self, PyObject *unused)
{
    return Py_NewRef(hook == NULL ? Py_None : hook);
}

static PyMethodDef module_methods[] = {
    {"set_hook", (PyCFunction)set_hook, METH_O, "Install (None: remove) the step hook; use ringcast.steps.set_step_hook."},
    {"get_hook", (PyCFunction)get_hook, METH_NOARGS, "The step hook, or None."},
    {"spin", (PyCFunction)(void (*)(void))wait_spin, METH_FASTCALL,
     "spin(ready, clock, spin_end, deadline, cancelled, tight_looks, counters) -> bool: a wait's spin phase."},
    {NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ringcast._protocol",
                                    "The ring's and the eventcount's atomic steps (see _protocol.c).", -1, module_methods};

static int
intern(PyObject **slot, const char *s)
{
    *slot = PyUnicode_InternFromString(s);
    return *slot == NULL ? -1 : 0;
}

PyMODINIT_FUNC
PyInit__protocol(void)
{
    struct {
        PyObject **slot;
        const char *s;
    } names[] = {
        {&s_writer, "writer"}, {&s_WriterClaim, "WriterClaim"},
        {&s_WriterClearWritten, "WriterClearWritten"}, {&s_WriterWritePayload, "WriterWritePayload"},
        {&s_WriterClearReadFlag, "WriterClearReadFlag"}, {&s_WriterPublish, "WriterPublish"},
        {&s_WriterEvict, "WriterEvict"}, {&s_ReaderLoadWritten, "ReaderLoadWritten"},
        {&s_ReaderLoadReadFlag, "ReaderLoadReadFlag"}, {&s_ReaderCopy, "ReaderCopy"}, {&s_ReaderAck, "ReaderAck"},
        {&s_ParkSnapshot, "ParkSnapshot"}, {&s_ParkAnnounce, "ParkAnnounce"}, {&s_ParkSleep, "ParkSleep"},
        {&s_ParkRetire, "ParkRetire"}, {&s_NotifyLoadWaiters, "NotifyLoadWaiters"}, {&s_NotifyWake, "NotifyWake"},
        {&s_notify_load_waiters_m, "_notify_load_waiters"}, {&s_notify_wake_m, "_notify_wake"},
        {&s_parks, "parks"}, {&s_wakeups, "wakeups"}, {&s_spins, "spins"},
        /* the endpoints' (_protocol_endpoint.c) */
        {&s_m_writer_claim, "_writer_claim"}, {&s_m_writer_clear_written, "_writer_clear_written"},
        {&s_m_writer_write_payload, "_writer_write_payload"}, {&s_m_writer_clear_read_flag, "_writer_clear_read_flag"},
        {&s_m_writer_publish, "_writer_publish"}, {&s_m_reader_load_written, "_reader_load_written"},
        {&s_m_reader_load_read_flag, "_reader_load_read_flag"}, {&s_m_reader_copy, "_reader_copy"},
        {&s_m_reader_check_evicted, "_reader_check_evicted"}, {&s_m_reader_ack, "_reader_ack"},
        {&s_m_notify, "notify"}, {&s_m_ready, "ready"}, {&s_m_wait_ready, "wait_ready"}, {&s_m_claim, "claim"},
        {&s_m_claim_message, "_claim_message"}, {&s_m_clear_flags_and_publish, "_clear_flags_and_publish"},
        {&s_m_wait, "_wait"}, {&s_m_finish, "_finish"}, {&s_m_aborted, "_aborted"},
        {&s_m_send_overflow, "_writer_send_overflow"}, {&s_m_recv_overflow, "_reader_recv_overflow"},
        {&s_m_evicted_error, "_evicted_error"}, {&s_m_release, "release"}, {&s_parks_on, "parks_on"},
        {&s_timeout, "timeout"}, {&s_overflow, "overflow"}, {&s_split_payload, "split_payload"},
        {&s_unpublished, "unpublished"}, {&s_deadline, "deadline"}, {&s_parts, "parts"}, {&s_copy_out, "copy_out"},
    };
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if (intern(names[k].slot, names[k].s) < 0)
            return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    /* the types are kept for the module's life (the endpoints compare against them) */
    WriterStepsType = (PyTypeObject *)PyType_FromSpec(&writer_spec);
    ReaderStepsType = (PyTypeObject *)PyType_FromSpec(&reader_spec);
    EventCountType = (PyTypeObject *)PyType_FromSpec(&ec_spec);
    WriterEndpointType = (PyTypeObject *)PyType_FromSpec(&wep_spec);
    ReaderEndpointType = (PyTypeObject *)PyType_FromSpec(&rep_spec);
    overflow_marker = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    int bad = WriterStepsType == NULL || ReaderStepsType == NULL || EventCountType == NULL || WriterEndpointType == NULL ||
              ReaderEndpointType == NULL || overflow_marker == NULL ||
              PyModule_AddObjectRef(m, "_WriterSteps", (PyObject *)WriterStepsType) < 0 ||
              PyModule_AddObjectRef(m, "_ReaderSteps", (PyObject *)ReaderStepsType) < 0 ||
              PyModule_AddObjectRef(m, "EventCount", (PyObject *)EventCountType) < 0 ||
              PyModule_AddObjectRef(m, "_WriterEndpoint", (PyObject *)WriterEndpointType) < 0 ||
              PyModule_AddObjectRef(m, "_ReaderEndpoint", (PyObject *)ReaderEndpointType) < 0 ||
              PyModule_AddObjectRef(m, "OVERFLOW", overflow_marker) < 0 ||
              PyModule_AddIntConstant(m, "TRACEPOINTS", RC_TRACEPOINTS) < 0;
    if (bad) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
