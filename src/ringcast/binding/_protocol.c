/* ringcast._protocol: the CPython binding of the protocol core (src/ringcast/core/rc_core.c, plain
 * C: each side's whole per-message state machine, its steps, its waits). The binding converts
 * arguments, fills the core's interface (rc_iface) once when an endpoint is bound, turns the
 * core's error codes into the project's exceptions, and adapts the Python step hook to the core's
 * single tracepoint (rc_step_hook). It takes no protocol decision: tests/package/test_structure.py reads
 * these files and fails if one calls a ring step itself (only the core orders them). Its entry
 * points are the production ones only; the single steps, EventCount and the planted-bug switch
 * are the lab's test extension's (ringcast_lab._steps, src/ringcast_lab/steps/).
 *
 * Files (one translation unit): _protocol_side.c (a side's mapping, core state and the interface
 * functions that need no observer; shared with the lab's test extension), _protocol_counters.c
 * (Counters, Cancel), _protocol_endpoint.c (the endpoint types: the interface's upcalls to the
 * observer, _bind; their entry points in _protocol_sides.c).
 *
 * The step hook: hook(action, side, index, reader) before each step's shared-memory access
 * (ringcast.steps has the contract); set_hook installs the trampoline as rc_step_hook, NULL when
 * no hook is set (production: one NULL test per step). -DRINGCAST_NO_TRACEPOINTS compiles the
 * tracepoints out (tests/stateful/bench_hook.py's comparison build); -DRINGCAST_TEST_PLANTED
 * builds the planted bugs of tests/stateful (core/rc_planted.c, switched on per endpoint by the
 * lab's _steps._plant); setup.py passes neither, and the module says so (TRACEPOINTS, PLANTED).
 *
 * State: the module's (proto_state: the clock set_clock installed, the exception and marker the
 * endpoints copy when they are bound, the types), looked up at bind only; the hook alone is a
 * file static, because rc_step_hook, process-wide and without a context, has nothing to find a
 * module by. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/rc_fences.h"
#include "../core/rc_core.c"

static PyObject *hook; /* the Python step hook, or NULL (process-wide: the module docstring) */

static PyObject *
current_hook(void)
{
    return Py_XNewRef(hook);
}

#include "_protocol_side.c"

typedef struct {
    PyObject *clock_monotonic, *clock_sleep; /* set_clock's (NULL: the real clock) */
    PyObject *cancelled;                     /* ringcast.errors.Cancelled */
    PyObject *overflow_marker;               /* OVERFLOW: what copy_out returns for a marker chunk */
    PyObject *mv_release;                    /* memoryview.release, called on a view copy_out kept */
    PyTypeObject *counters_type, *cancel_type, *wep_type, *rep_type;
} proto_state;

static struct PyModuleDef module;

/* The module's state, for _bind (the endpoints keep what they use) */
static proto_state *
state(void)
{
    PyObject *m = PyState_FindModule(&module);
    if (m == NULL)
        PyErr_SetString(PyExc_RuntimeError, "ringcast._protocol is not initialised");
    return m == NULL ? NULL : PyModule_GetState(m);
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

/* A timeout argument: None -> RC_NO_TIMEOUT, else seconds (a finite number >= 0) */
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

/* ------------------------------------------------------------------------ the step hook -- */

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

/* set_clock(clock or None): the clock of the waits of every endpoint bound from now on
 * (ringcast.steps sets it: steps.clock), its two methods read here once; None or the time module
 * itself: the real one (CLOCK_MONOTONIC, a nanosleep) */
static PyObject *
set_clock(PyObject *self, PyObject *clock)
{
    proto_state *st = PyModule_GetState(self);
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
    Py_XSETREF(st->clock_monotonic, mono);
    Py_XSETREF(st->clock_sleep, sleep);
    Py_RETURN_NONE;
}

#include "_protocol_counters.c"
#include "_protocol_endpoint.c"

/* --------------------------------------------------------------------------------- the module -- */

static PyMethodDef module_methods[] = {
    {"set_hook", (PyCFunction)set_hook, METH_O, "Install (None: remove) the step hook; use ringcast.steps.set_step_hook."},
    {"get_hook", (PyCFunction)get_hook, METH_NOARGS, "The step hook, or None."},
    {"set_clock", (PyCFunction)set_clock, METH_O,
     "Install (None: the real one) the clock of the endpoints bound from now on; use ringcast.steps.set_clock."},
    {NULL},
};

static int
module_traverse(PyObject *m, visitproc visit, void *arg)
{
    proto_state *st = PyModule_GetState(m);
    PyObject *refs[] = {st->clock_monotonic, st->clock_sleep, st->cancelled, st->overflow_marker, st->mv_release,
                        (PyObject *)st->counters_type, (PyObject *)st->cancel_type, (PyObject *)st->wep_type,
                        (PyObject *)st->rep_type};
    for (size_t k = 0; k < sizeof refs / sizeof refs[0]; k++)
        Py_VISIT(refs[k]);
    return 0;
}

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "ringcast._protocol", .m_doc = "The CPython binding of ringcast's protocol core (see _protocol.c).",
    .m_size = sizeof(proto_state), .m_methods = module_methods, .m_traverse = module_traverse,
};

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
    if (hook_names_init() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    proto_state *st = PyModule_GetState(m);
    PyObject *errors = PyImport_ImportModule("ringcast.errors");
    st->cancelled = errors == NULL ? NULL : PyObject_GetAttrString(errors, "Cancelled");
    Py_XDECREF(errors);
    st->mv_release = PyObject_GetAttrString((PyObject *)&PyMemoryView_Type, "release");
    st->overflow_marker = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    st->counters_type = (PyTypeObject *)PyType_FromSpec(&counters_spec);
    st->cancel_type = (PyTypeObject *)PyType_FromSpec(&cancel_spec);
    st->wep_type = (PyTypeObject *)PyType_FromSpec(&wep_spec);
    st->rep_type = (PyTypeObject *)PyType_FromSpec(&rep_spec);
    int bad = st->cancelled == NULL || st->mv_release == NULL || st->overflow_marker == NULL || st->counters_type == NULL
              || st->cancel_type == NULL || st->wep_type == NULL || st->rep_type == NULL
              || PyModule_AddObjectRef(m, "Counters", (PyObject *)st->counters_type) < 0
              || PyModule_AddObjectRef(m, "Cancel", (PyObject *)st->cancel_type) < 0
              || PyModule_AddObjectRef(m, "_WriterEndpoint", (PyObject *)st->wep_type) < 0
              || PyModule_AddObjectRef(m, "_ReaderEndpoint", (PyObject *)st->rep_type) < 0
              || PyModule_AddObjectRef(m, "OVERFLOW", st->overflow_marker) < 0
              || PyModule_AddIntConstant(m, "TRACEPOINTS", RC_TRACEPOINTS) < 0
              || PyModule_AddIntConstant(m, "PLANTED", RC_PLANTED) < 0;
    if (bad) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
