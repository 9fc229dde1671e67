/* _steps_wait.c: EventCount, the eventcount's words at fixed addresses with the core's
 * eventcount steps (rc_wait.c: ParkSnapshot .. NotifyWake, each with its tracepoint) as methods,
 * part of ringcast_lab._steps (included by _steps.c). For tests and tools (tests/protocol/test_atomics.py):
 * an endpoint's waits and notifies are the core's own, on its pinned mapping. The addresses must
 * stay mapped while the object is used. */

typedef struct {
    PyObject_HEAD
    uint32_t *seq, *waiters;
    rc_counters counters; /* the steps' parks and wakeups */
} EventCountObject;

static PyTypeObject *EventCountType;

/* the interface of a bare eventcount: only the futex */
static const rc_iface ec_io = {.futex_wait = side_futex_wait, .futex_wake = side_futex_wake};

static int
get_addr(PyObject *obj, uint32_t **out)
{
    void *a = PyLong_AsVoidPtr(obj);
    if (a == NULL && PyErr_Occurred())
        return -1;
    if (a == NULL || (uintptr_t)a % 4 != 0) {
        PyErr_Format(PyExc_ValueError, "address %p is not a 4-byte aligned address", a);
        return -1;
    }
    *out = (uint32_t *)a;
    return 0;
}

static int
ec_init(EventCountObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"seq_addr", "waiters_addr", NULL};
    PyObject *seq, *waiters;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:EventCount", names, &seq, &waiters))
        return -1;
    return get_addr(seq, &self->seq) < 0 || get_addr(waiters, &self->waiters) < 0 ? -1 : 0;
}

static void
ec_dealloc(EventCountObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* The stepping side (args[0]: "writer" or a reader index) and its chunk (args[1]) as an rc_side */
static int
ec_side(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *sig, rc_side *s)
{
    if (self->seq == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this EventCount was never initialised: EventCount(seq_addr, waiters_addr)");
        return -1;
    }
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments, got %zd", sig, want, nargs);
        return -1;
    }
    long side = PyUnicode_Check(args[0]) && (PyUnicode_CompareWithASCIIString(args[0], "writer") == 0) ? RC_WRITER : PyLong_AsLong(args[0]);
    Py_ssize_t index = PyLong_AsSsize_t(args[1]);
    if ((side == -1 || index == -1) && PyErr_Occurred())
        return -1;
    memset(s, 0, sizeof *s);
    s->io = &ec_io;
    s->counters = &self->counters;
    s->side = (int)side;
    s->index = (size_t)index;
    return 0;
}

#define EC_SIDE(sig, want)                                                                           \
    rc_side s;                                                                                       \
    if (ec_side(self, args, nargs, (want), (sig), &s) < 0)                                           \
        return NULL

/* Spec: ParkSnapshot. s := seq */
static PyObject *
ec_park_snapshot(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    EC_SIDE("_park_snapshot(side, index)", 2);
    uint32_t snap;
    return rc_park_snapshot(&s, self->seq, &snap) == RC_OK ? PyLong_FromUnsignedLong(snap) : NULL;
}

/* Spec: ParkAnnounce. waiters += 1, F6W */
static PyObject *
ec_park_announce(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    EC_SIDE("_park_announce(side, index)", 2);
    return rc_park_announce(&s, self->waiters) == RC_OK ? Py_NewRef(Py_None) : NULL;
}

/* Spec: ParkSleep. futex_wait(seq, snapshot, timeout) with the GIL released: 0 woken, 1 seq had
 * moved, 2 timed out, 3 interrupted (ringcast.atomics.TIMED_OUT is 2). */
static PyObject *
ec_park_sleep(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    EC_SIDE("_park_sleep(side, index, snapshot, timeout)", 4);
    unsigned long expected = PyLong_AsUnsignedLong(args[2]);
    if (expected == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    double timeout = PyFloat_AsDouble(args[3]);
    if (timeout == -1.0 && PyErr_Occurred())
        return NULL;
    if (!(timeout >= 0.0) || timeout == Py_HUGE_VAL) {
        PyErr_Format(PyExc_ValueError, "a park's timeout must be a finite number of seconds >= 0, got %R", args[3]);
        return NULL;
    }
    int result = 0;
    return rc_park_sleep(&s, self->seq, (uint32_t)expected, timeout, &result) == RC_OK ? PyLong_FromLong(result) : NULL;
}

/* Spec: ParkRetire. waiters -= 1 */
static PyObject *
ec_park_retire(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    EC_SIDE("_park_retire(side, index)", 2);
    return rc_park_retire(&s, self->waiters) == RC_OK ? Py_NewRef(Py_None) : NULL;
}

/* Spec: NotifyLoadWaiters. F6N, then the load */
static PyObject *
ec_notify_load_waiters(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    EC_SIDE("_notify_load_waiters(side, index)", 2);
    uint32_t n;
    return rc_notify_load_waiters(&s, self->waiters, &n) == RC_OK ? PyLong_FromUnsignedLong(n) : NULL;
}

/* Spec: NotifyWake. seq += 1; wake every sleeper on seq. */
static PyObject *
ec_notify_wake(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    EC_SIDE("_notify_wake(side, index)", 2);
    return rc_notify_wake(&s, self->seq) == RC_OK ? Py_NewRef(Py_None) : NULL;
}

/* NotifyLoadWaiters, then NotifyWake only if somebody is (about to be) parked. */
static PyObject *
ec_notify(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    EC_SIDE("notify(side, index)", 2);
    uint32_t n = 0;
    if (rc_notify_load_waiters(&s, self->waiters, &n) != RC_OK || (n > 0 && rc_notify_wake(&s, self->seq) != RC_OK))
        return NULL;
    Py_RETURN_NONE;
}

/* Wake every sleeper unconditionally (not a spec action, not traced). The words must be mapped:
 * an endpoint's wake_all pins its mapping instead (shutdown). */
static PyObject *
ec_wake_all(EventCountObject *self, PyObject *unused)
{
    if (self->seq == NULL)
        Py_RETURN_NONE;
    return wake(&ec_io, self->seq) == RC_OK ? Py_NewRef(Py_None) : NULL;
}

static PyObject *
ec_get_seq(EventCountObject *self, void *closure)
{
    return PyLong_FromVoidPtr(self->seq);
}

static PyObject *
ec_get_waiters(EventCountObject *self, void *closure)
{
    return PyLong_FromVoidPtr(self->waiters);
}

static PyMethodDef ec_methods[] = {
    {"_park_snapshot", (PyCFunction)(void (*)(void))ec_park_snapshot, METH_FASTCALL, "Spec: ParkSnapshot(side, index) -> seq."},
    {"_park_announce", (PyCFunction)(void (*)(void))ec_park_announce, METH_FASTCALL, "Spec: ParkAnnounce(side, index): waiters += 1, F6W."},
    {"_park_sleep", (PyCFunction)(void (*)(void))ec_park_sleep, METH_FASTCALL,
     "Spec: ParkSleep(side, index, snapshot, timeout) -> futex_wait's result (2: timed out)."},
    {"_park_retire", (PyCFunction)(void (*)(void))ec_park_retire, METH_FASTCALL, "Spec: ParkRetire(side, index): waiters -= 1."},
    {"_notify_load_waiters", (PyCFunction)(void (*)(void))ec_notify_load_waiters, METH_FASTCALL,
     "Spec: NotifyLoadWaiters(side, index) -> waiters (after F6N)."},
    {"_notify_wake", (PyCFunction)(void (*)(void))ec_notify_wake, METH_FASTCALL, "Spec: NotifyWake(side, index)."},
    {"notify", (PyCFunction)(void (*)(void))ec_notify, METH_FASTCALL,
     "notify(side, index): NotifyLoadWaiters, then NotifyWake only if somebody is parked."},
    {"wake_all", (PyCFunction)ec_wake_all, METH_NOARGS, "Wake every sleeper (not a spec action; the words must be mapped)."},
    {NULL},
};

static PyGetSetDef ec_getset[] = {
    {"seq", (getter)ec_get_seq, NULL, "the address of the sequence word", NULL},
    {"waiters", (getter)ec_get_waiters, NULL, "the address of the waiter count", NULL},
    {NULL},
};

static PyMemberDef ec_members[] = {
    {"parks", T_ULONGLONG, offsetof(EventCountObject, counters.parks), READONLY, "ParkSleep steps taken"},
    {"wakeups", T_ULONGLONG, offsetof(EventCountObject, counters.wakeups), READONLY, "NotifyWake steps taken"},
    {NULL},
};

static PyType_Slot ec_slots[] = {
    {Py_tp_doc, "EventCount(seq_addr, waiters_addr): the parking protocol's words at fixed addresses (ringcast.waiting)."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, ec_init},
    {Py_tp_dealloc, ec_dealloc},
    {Py_tp_methods, ec_methods},
    {Py_tp_getset, ec_getset},
    {Py_tp_members, ec_members},
    {0, NULL},
};

static PyType_Spec ec_spec = {.name = "ringcast_lab._steps.EventCount", .basicsize = sizeof(EventCountObject),
                              .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, .slots = ec_slots};
