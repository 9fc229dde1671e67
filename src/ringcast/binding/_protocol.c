/* ringcast._protocol: the CPython binding of the protocol core (src/ringcast/core/rc_core.c, plain
 * C: each side's whole per-message state machine, its steps, its waits). The binding converts
 * arguments, fills the core's interface (rc_iface) once when an endpoint is built, turns the
 * core's error codes into the project's exceptions, and adapts the Python step hook to the core's
 * single tracepoint (rc_step_hook). It takes no protocol decision: tests/test_structure.py reads
 * these files and fails if one calls a ring step itself (only the core orders them).
 *
 * Files (one translation unit): _protocol_counters.c (Counters, Cancel), _protocol_cursor.c (the
 * cursor types: the mapping, the layout, the core's state, the interface's functions that need no
 * endpoint), _protocol_ring.c (a cursor's single steps for tests and tools: rc_step),
 * _protocol_wait.c (EventCount on words at fixed addresses: the core's eventcount steps, for tests
 * and tools), _protocol_endpoint.c (the endpoint types: the interface's upcalls to the observer;
 * their entry points in _protocol_sides.c).
 *
 * The step hook: hook(action, side, index, reader) before each step's shared-memory access
 * (ringcast.steps has the contract); set_hook installs the trampoline as rc_step_hook, NULL when
 * no hook is set (production: one NULL test per step). -DRINGCAST_NO_TRACEPOINTS compiles the
 * tracepoints out (tests/stateful/bench_hook.py's comparison build); -DRINGCAST_TEST_PLANTED
 * builds the planted bugs of tests/stateful (core/rc_planted.c, _plant()); setup.py passes
 * neither, and the module says so (TRACEPOINTS, PLANTED). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <sched.h>
#include <string.h>

#include "../core/rc_fences.h"
#include "../core/rc_core.c"

static PyObject *hook;                          /* the Python step hook, or NULL */
static PyObject *action_names[RC_N_ACTIONS];    /* interned "WriterClaim", ... */
static PyObject *s_writer, *errors_module;
/* the clock: a harness's monotonic() and sleep() (ringcast.steps.set_clock), or NULL and time.sleep */
static PyObject *clock_monotonic, *clock_sleep, *time_sleep;

/* ----------------------------------------------------------------------------- helpers -- */

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

/* An upcall may run while the core unwinds from an earlier error (an exception pending): it
 * runs with that exception put aside, and a new one gets it as its __context__. */
typedef struct {
    PyObject *t, *v, *tb;
} saved_exc;

static inline void
put_aside(saved_exc *e)
{
    PyErr_Fetch(&e->t, &e->v, &e->tb);
}

static inline int
take_back(saved_exc *e, int ok)
{
    rethrow(e->t, e->v, e->tb);
    return ok ? RC_OK : RC_ERR_RAISED;
}

/* Fastcall arguments by position (the first npos of `names`) or keyword, into out[] (NULL: not
 * given); the first nreq are required. */
static int
parse(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *const *names,
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
        while (k < n && !(PyUnicode_CompareWithASCIIString(key, names[k]) == 0))
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
            PyErr_Format(PyExc_TypeError, "%s missing required argument '%s'", fname, names[k]);
            return -1;
        }
    return 0;
}

/* A timeout argument: None -> RC_NO_TIMEOUT, else seconds (checked by ringcast.waiting.check_timeout's rules) */
static int
seconds(PyObject *v, double *out)
{
    if (v == NULL || v == Py_None) {
        *out = RC_NO_TIMEOUT;
        return 0;
    }
    double d = PyFloat_AsDouble(v);
    if (d == -1.0 && PyErr_Occurred())
        return -1;
    if (!(d >= 0.0) || d == Py_HUGE_VAL) {
        PyErr_Format(PyExc_ValueError, "timeout must be a finite number of seconds >= 0, got %R", v);
        return -1;
    }
    *out = d;
    return 0;
}

/* ringcast.errors.<name>(message): a new exception object */
static PyObject *
project_error(const char *name, PyObject *msg)
{
    if (errors_module == NULL && (errors_module = PyImport_ImportModule("ringcast.errors")) == NULL)
        return NULL;
    PyObject *cls = PyObject_GetAttrString(errors_module, name);
    PyObject *exc = cls == NULL || msg == NULL ? NULL : PyObject_CallOneArg(cls, msg);
    Py_XDECREF(cls);
    return exc;
}

/* ------------------------------------------------------------------------ the step hook -- */

static PyObject *
side_object(int side)
{
    return side == RC_WRITER ? Py_NewRef(s_writer) : PyLong_FromLong(side);
}

/* rc_step_hook while a Python hook is set: hook(action, side, index, reader) */
static int
hook_trampoline(rc_action action, int side, size_t index, int reader)
{
    PyObject *h = hook;
    if (h == NULL)
        return 0;
    saved_exc e;
    put_aside(&e);
    Py_INCREF(h); /* the hook may replace itself */
    PyObject *sd = side_object(side), *idx = PyLong_FromSize_t(index);
    PyObject *rd = reader == RC_NO_READER ? Py_NewRef(Py_None) : PyLong_FromLong(reader), *res = NULL;
    if (sd != NULL && idx != NULL && rd != NULL) {
        PyObject *args[4] = {action_names[action], sd, idx, rd};
        res = PyObject_Vectorcall(h, args, 4, NULL);
    }
    Py_XDECREF(sd);
    Py_XDECREF(idx);
    Py_XDECREF(rd);
    Py_DECREF(h);
    Py_XDECREF(res);
    return take_back(&e, res != NULL) == RC_OK ? 0 : -1;
}

/* set_hook(fn or None) / get_hook(): the one step hook (ringcast.steps sets it and mirrors it in steps.hook) */
static PyObject *
set_hook(PyObject *self, PyObject *fn)
{
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "a step hook must be callable or None, got %R", fn);
        return NULL;
    }
    PyObject *old = hook;
    hook = fn == Py_None ? NULL : Py_NewRef(fn);
    rc_step_hook = hook == NULL ? NULL : hook_trampoline;
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

static PyObject *
get_hook(PyObject *self, PyObject *unused)
{
    return Py_NewRef(hook == NULL ? Py_None : hook);
}

/* set_clock(clock or None): the clock of every wait (ringcast.steps sets it: steps.clock), read
 * here once; None or the time module itself: the real one (CLOCK_MONOTONIC, time.sleep) */
static PyObject *
set_clock(PyObject *self, PyObject *clock)
{
    PyObject *mono = NULL, *sleep = NULL;
    if (clock != Py_None && !PyModule_Check(clock)) {
        mono = PyObject_GetAttrString(clock, "monotonic");
        sleep = mono == NULL ? NULL : PyObject_GetAttrString(clock, "sleep");
        if (sleep == NULL || !PyCallable_Check(mono) || !PyCallable_Check(sleep)) {
            Py_XDECREF(mono);
            Py_XDECREF(sleep);
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "a clock must have callable monotonic() and sleep(seconds), got %R", clock);
            return NULL;
        }
    }
    Py_XSETREF(clock_monotonic, mono);
    Py_XSETREF(clock_sleep, sleep == NULL ? Py_NewRef(time_sleep) : sleep);
    Py_RETURN_NONE;
}

#include "_protocol_counters.c"
#include "_protocol_cursor.c"
#include "_protocol_ring.c"
#include "_protocol_wait.c"
#include "_protocol_endpoint.c"

/* --------------------------------------------------------------------------------- the module -- */

static PyMethodDef module_methods[] = {
    {"set_hook", (PyCFunction)set_hook, METH_O, "Install (None: remove) the step hook; use ringcast.steps.set_step_hook."},
    {"get_hook", (PyCFunction)get_hook, METH_NOARGS, "The step hook, or None."},
    {"set_clock", (PyCFunction)set_clock, METH_O, "Install (None: the real one) the waits' clock; use ringcast.steps.set_clock."},
#ifdef RINGCAST_TEST_PLANTED
    {"_plant", (PyCFunction)(void (*)(void))plant, METH_FASTCALL, "_plant(cursor, name): a planted bug of tests/stateful (test build only)."},
#endif
    {NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ringcast._protocol",
                                    "The CPython binding of ringcast's protocol core (see _protocol.c).", -1, module_methods};

#ifdef RINGCAST_NO_TRACEPOINTS
#define RC_TRACEPOINTS 0
#else
#define RC_TRACEPOINTS 1
#endif
#ifdef RINGCAST_TEST_PLANTED
#define RC_PLANTED 1
#else
#define RC_PLANTED 0
#endif

PyMODINIT_FUNC
PyInit__protocol(void)
{
    for (int a = 0; a < RC_N_ACTIONS; a++)
        if ((action_names[a] = PyUnicode_InternFromString(rc_action_names[a])) == NULL)
            return NULL;
    if ((s_writer = PyUnicode_InternFromString("writer")) == NULL)
        return NULL;
    PyObject *time_module = PyImport_ImportModule("time");
    time_sleep = time_module == NULL ? NULL : PyObject_GetAttrString(time_module, "sleep");
    Py_XDECREF(time_module);
    if (time_sleep == NULL)
        return NULL;
    clock_sleep = Py_NewRef(time_sleep);
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    /* the types are kept for the module's life (the endpoints compare against them) */
    CountersType = (PyTypeObject *)PyType_FromSpec(&counters_spec);
    CancelType = (PyTypeObject *)PyType_FromSpec(&cancel_spec);
    WriterStepsType = (PyTypeObject *)PyType_FromSpec(&writer_spec);
    ReaderStepsType = (PyTypeObject *)PyType_FromSpec(&reader_spec);
    EventCountType = (PyTypeObject *)PyType_FromSpec(&ec_spec);
    WriterEndpointType = (PyTypeObject *)PyType_FromSpec(&wep_spec);
    ReaderEndpointType = (PyTypeObject *)PyType_FromSpec(&rep_spec);
    overflow_marker = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    int bad = CountersType == NULL || CancelType == NULL || WriterStepsType == NULL || ReaderStepsType == NULL ||
              EventCountType == NULL || WriterEndpointType == NULL || ReaderEndpointType == NULL || overflow_marker == NULL ||
              PyModule_AddObjectRef(m, "Counters", (PyObject *)CountersType) < 0 ||
              PyModule_AddObjectRef(m, "Cancel", (PyObject *)CancelType) < 0 ||
              PyModule_AddObjectRef(m, "_WriterSteps", (PyObject *)WriterStepsType) < 0 ||
              PyModule_AddObjectRef(m, "_ReaderSteps", (PyObject *)ReaderStepsType) < 0 ||
              PyModule_AddObjectRef(m, "EventCount", (PyObject *)EventCountType) < 0 ||
              PyModule_AddObjectRef(m, "_WriterEndpoint", (PyObject *)WriterEndpointType) < 0 ||
              PyModule_AddObjectRef(m, "_ReaderEndpoint", (PyObject *)ReaderEndpointType) < 0 ||
              PyModule_AddObjectRef(m, "OVERFLOW", overflow_marker) < 0 ||
              PyModule_AddIntConstant(m, "TRACEPOINTS", RC_TRACEPOINTS) < 0 ||
              PyModule_AddIntConstant(m, "PLANTED", RC_PLANTED) < 0;
    if (bad) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
