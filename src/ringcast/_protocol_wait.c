/* _protocol_wait.c: the eventcount's steps (spec/Ring.tla's Park* and Notify* actions) and the
 * spin phase of a wait (spin: tight looks, then a look and a yield per round), part of
 * the ringcast._protocol extension: included by _protocol.c, which has the tracepoint (trace),
 * the action names and the rules every step follows. */

/* A (seq, waiters) pair of 32-bit words at fixed addresses of a mapping (ringcast.waiting: the
 * protocol, the proof sketch and the numbers). The steps take the stepping side and the chunk it
 * is at, which only feed the hook. The addresses are the ring's (ShmRingBuffer.*_seq_addrs); the
 * endpoint that owns an eventcount stops using it before the ring is closed. */
typedef struct {
    PyObject_HEAD
    uint32_t *seq, *waiters;
    PyObject *counters; /* ringcast.waiting.Counters: parks, wakeups */
} EventCountObject;

static PyTypeObject *EventCountType;

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
    static char *names[] = {"seq_addr", "waiters_addr", "counters", NULL};
    PyObject *seq, *waiters, *counters;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:EventCount", names, &seq, &waiters, &counters))
        return -1;
    if (get_addr(seq, &self->seq) < 0 || get_addr(waiters, &self->waiters) < 0)
        return -1;
    Py_INCREF(counters);
    Py_XSETREF(self->counters, counters);
    return 0;
}

static int
ec_traverse(EventCountObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->counters);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int
ec_tp_clear(EventCountObject *self)
{
    Py_CLEAR(self->counters);
    return 0;
}

static void
ec_dealloc(EventCountObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->counters);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* counters.<name> += n (a Python attribute: the counters are the queue's, snapshotted by statistics()) */
static int
bump_by(PyObject *counters, PyObject *name, long n)
{
    PyObject *v = PyObject_GetAttr(counters, name);
    if (v == NULL)
        return -1;
    PyObject *one = PyLong_FromLong(n), *w = one ? PyNumber_Add(v, one) : NULL;
    Py_DECREF(v);
    Py_XDECREF(one);
    if (w == NULL)
        return -1;
    int rc = PyObject_SetAttr(counters, name, w);
    Py_DECREF(w);
    return rc;
}

#define bump(counters, name) bump_by((counters), (name), 1)

/* How every eventcount step starts: its arguments (side, index, then `want` - 2 more), then its
 * tracepoint (none for `action` NULL: notify, which is two steps). 0, or -1 with an exception set. */
static int
ec_begin(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *sig,
         PyObject *action)
{
    if (self->seq == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this EventCount was never initialised: EventCount(seq_addr, waiters_addr, counters)");
        return -1;
    }
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments, got %zd", sig, want, nargs);
        return -1;
    }
    Py_ssize_t index = PyLong_AsSsize_t(args[1]);
    if (index == -1 && PyErr_Occurred())
        return -1;
    return action == NULL ? 0 : trace(action, args[0], index, Py_None);
}

/* Spec: ParkSnapshot. s := seq */
static PyObject *
ec_park_snapshot(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (ec_begin(self, args, nargs, 2, "_park_snapshot(side, index)", s_ParkSnapshot) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(rc_load_u32(self->seq));
}

/* Spec: ParkAnnounce. waiters += 1: the seq_cst RMW, then the full fence F6W (before ParkRecheck) */
static PyObject *
ec_park_announce(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (ec_begin(self, args, nargs, 2, "_park_announce(side, index)", s_ParkAnnounce) < 0)
        return NULL;
    rc_fetch_add_u32(self->waiters, 1); /* F6W */
    Py_RETURN_NONE;
}

/* Spec: ParkSleep. futex_wait(seq, snapshot, timeout) with the GIL released: 0 woken, 1 seq had
 * moved, 2 timed out, 3 interrupted (ringcast.atomics.TIMED_OUT is 2). */
static PyObject *
ec_park_sleep(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (ec_begin(self, args, nargs, 4, "_park_sleep(side, index, snapshot, timeout)", s_ParkSleep) < 0)
        return NULL;
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
    if (timeout > 1e9) /* ~31 years: the sleep is capped by recheck_interval, which may be set that high */
        timeout = 1e9;
    if (bump(self->counters, s_parks) < 0)
        return NULL;
#ifdef __linux__
    struct timespec ts;
    int rc, err;
    ts.tv_sec = (time_t)timeout;
    ts.tv_nsec = (long)((timeout - (double)ts.tv_sec) * 1e9);
    Py_BEGIN_ALLOW_THREADS
    rc = rc_futex_wait(self->seq, (uint32_t)expected, &ts);
    err = errno;
    Py_END_ALLOW_THREADS
    if (rc >= 0)
        return PyLong_FromLong(rc);
    errno = err;
    return PyErr_SetFromErrno(PyExc_OSError);
#else
    PyErr_SetString(PyExc_NotImplementedError, "ParkSleep needs a futex (Linux)");
    return NULL;
#endif
}

/* Spec: ParkRetire. waiters -= 1 */
static PyObject *
ec_park_retire(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (ec_begin(self, args, nargs, 2, "_park_retire(side, index)", s_ParkRetire) < 0)
        return NULL;
    rc_fetch_add_u32(self->waiters, (uint32_t)-1);
    Py_RETURN_NONE;
}

/* Spec: NotifyLoadWaiters. F6N, a full fence: the publishing store (written := 1 / read_r := 1)
 * is visible before `waiters` is read (store->load order, which x86 does not give either). */
static PyObject *
ec_notify_load_waiters(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (ec_begin(self, args, nargs, 2, "_notify_load_waiters(side, index)", s_NotifyLoadWaiters) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(rc_fence_load_u32(self->waiters)); /* F6N */
}

static int
wake(uint32_t *seq)
{
    rc_fetch_add_u32(seq, 1);
#ifdef __linux__
    if (rc_futex_wake(seq, WAKE_ALL) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
#endif
    return 0;
}

/* Spec: NotifyWake. seq += 1; wake every sleeper on seq. */
static PyObject *
ec_notify_wake(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (ec_begin(self, args, nargs, 2, "_notify_wake(side, index)", s_NotifyWake) < 0)
        return NULL;
    if (wake(self->seq) < 0 || bump(self->counters, s_wakeups) < 0)
        return NULL;
    Py_RETURN_NONE;
}

typedef PyObject *(*ec_step)(EventCountObject *, PyObject *const *, Py_ssize_t);

/* One of notify's steps: the C function on an EventCount, a subclass's override (by name) else. */
static PyObject *
notify_step(EventCountObject *self, ec_step fn, PyObject *name, PyObject *const *args)
{
    if (Py_TYPE(self) == EventCountType)
        return fn(self, args, 2);
    PyObject *slots[4] = {NULL, (PyObject *)self, args[0], args[1]}; /* slots[0]: the OFFSET flag's spare */
    return PyObject_VectorcallMethod(name, slots + 1, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* NotifyLoadWaiters, then NotifyWake only if somebody is (about to be) parked. */
static PyObject *
ec_notify(EventCountObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (ec_begin(self, args, nargs, 2, "notify(side, index)", NULL) < 0)
        return NULL;
    PyObject *n = notify_step(self, ec_notify_load_waiters, s_notify_load_waiters_m, args);
    if (n == NULL)
        return NULL;
    int any = PyObject_IsTrue(n);
    Py_DECREF(n);
    if (any < 0)
        return NULL;
    return any ? notify_step(self, ec_notify_wake, s_notify_wake_m, args) : Py_NewRef(Py_None);
}

/* Wake every sleeper unconditionally (shutdown: sleepers re-check and see why). Not a spec
 * action and not traced: shutdown() may run on any thread. */
static PyObject *
ec_wake_all(EventCountObject *self, PyObject *unused)
{
    if (self->seq == NULL)
        Py_RETURN_NONE;
    if (wake(self->seq) < 0)
        return NULL;
    Py_RETURN_NONE;
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
    {"wake_all", (PyCFunction)ec_wake_all, METH_NOARGS, "Wake every sleeper (shutdown; not a spec action)."},
    {NULL},
};

static PyGetSetDef ec_getset[] = {
    {"seq", (getter)ec_get_seq, NULL, "the address of the sequence word", NULL},
    {"waiters", (getter)ec_get_waiters, NULL, "the address of the waiter count", NULL},
    {NULL},
};

static PyMemberDef ec_members[] = {
    {"counters", T_OBJECT, offsetof(EventCountObject, counters), READONLY, "the side's counters"},
    {NULL},
};

static PyType_Slot ec_slots[] = {
    {Py_tp_doc, "EventCount(seq_addr, waiters_addr, counters): the parking protocol's words (ringcast.waiting)."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, ec_init},
    {Py_tp_dealloc, ec_dealloc},
    {Py_tp_traverse, ec_traverse},
    {Py_tp_clear, ec_tp_clear},
    {Py_tp_methods, ec_methods},
    {Py_tp_getset, ec_getset},
    {Py_tp_members, ec_members},
    {0, NULL},
};

static PyType_Spec ec_spec = {"ringcast._protocol.EventCount", sizeof(EventCountObject), 0,
                              Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, ec_slots};

/* ------------------------------------------------------------------ the spin phase of a wait -- */

/* A call's result as a truth value, dropped: 1, 0, or -1 with an exception set (r NULL: the call
 * raised). */
static int
truth(PyObject *r)
{
    if (r == NULL)
        return -1;
    int ok = PyObject_IsTrue(r);
    Py_DECREF(r);
    return ok;
}

/* One look: 1 ready, 0 not, -1 error. */
static int
look(PyObject *ready)
{
    return truth(PyObject_CallNoArgs(ready));
}

/* spin(ready, clock, spin_end, deadline, cancelled, tight_looks, counters) -> bool: the spin phase
 * of ringcast.waiting.Waiter.wait (its docstring has the policy). `tight_looks` looks at once,
 * then until clock() reaches spin_end or the deadline (None: none): a look, then sched_yield with
 * the GIL released. True when ready() was; False when the spin is over or `cancelled[0]` is set
 * (the park phase, in Python, raises Cancelled first thing). Not a spec action: its looks are
 * ready()'s own steps, and `clock` is the waiting module's time.monotonic, which the stateful
 * harness replaces with its virtual time. counters.spins counts the yields. */
static PyObject *
wait_spin(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7)
        return PyErr_Format(PyExc_TypeError, "spin(ready, clock, spin_end, deadline, cancelled, tight_looks, counters): %zd arguments", nargs);
    PyObject *ready = args[0], *clock = args[1], *cancelled = args[4], *counters = args[6];
    double spin_end = PyFloat_AsDouble(args[2]), deadline = args[3] == Py_None ? Py_HUGE_VAL : PyFloat_AsDouble(args[3]);
    Py_ssize_t tight = PyLong_AsSsize_t(args[5]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyList_Check(cancelled) || PyList_GET_SIZE(cancelled) < 1)
        return PyErr_Format(PyExc_TypeError, "spin(): cancelled must be a one-element list, got %R", cancelled);
    long spins = 0;
    int res = 0;
    for (Py_ssize_t k = 0; k < tight && res == 0; k++)
        res = look(ready);
    while (res == 0) {
        if ((res = PyObject_IsTrue(PyList_GET_ITEM(cancelled, 0))) != 0) { /* shutdown(): the park phase says so */
            res = res < 0 ? -1 : 0;
            break;
        }
        if ((res = look(ready)) != 0)
            break;
        PyObject *t = PyObject_CallNoArgs(clock);
        double now = t == NULL ? -1.0 : PyFloat_AsDouble(t);
        Py_XDECREF(t);
        if (now == -1.0 && PyErr_Occurred()) {
            res = -1;
            break;
        }
        if (now >= spin_end || now >= deadline)
            break;
        spins++;
        Py_BEGIN_ALLOW_THREADS
        sched_yield();
        Py_END_ALLOW_THREADS
        if (PyErr_CheckSignals() < 0) /* a KeyboardInterrupt ends the spin as it ended the Python loop */
            res = -1;
    }
    if (spins > 0) { /* counters.spins += spins, keeping an exception that ended the spin */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        int bad = bump_by(counters, s_spins, spins) < 0;
        if (et != NULL) {
            if (bad)
                PyErr_Clear();
            PyErr_Restore(et, ev, tb);
        } else if (bad)
            res = -1;
    }
    return res < 0 ? NULL : PyBool_FromLong(res);
}
