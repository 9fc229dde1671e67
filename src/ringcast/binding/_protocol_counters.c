/* _protocol_counters.c: two small objects a queue's side shares with its endpoint, part of the
 * ringcast._protocol binding (included by _protocol.c):
 *
 * - Counters: the core's rc_counters (waits, spins, parks, wakeups, recheck_hits, timeouts,
 *   evictions, signals), which the core bumps in place; MessageQueue.statistics() snapshots them.
 * - Cancel: the cancel request of a queue object (rc_cancel). set() (any thread) makes every
 *   current and later wait of the endpoints built with it raise Cancelled, and wakes those that
 *   sleep: each endpoint registers itself at construction; a closed ring is skipped (the wake
 *   pins the mapping, so it never touches an unmapped one). */

typedef struct {
    PyObject_HEAD
    rc_counters c;
} CountersObject;


static PyMemberDef counters_members[] = {
    {"waits", T_ULONGLONG, offsetof(CountersObject, c.waits), 0, "waits that did not find the ring ready at once"},
    {"spins", T_ULONGLONG, offsetof(CountersObject, c.spins), 0, "yields of the spin phase"},
    {"parks", T_ULONGLONG, offsetof(CountersObject, c.parks), 0, "sleeps (ParkSleep, or a timed sleep without futex)"},
    {"wakeups", T_ULONGLONG, offsetof(CountersObject, c.wakeups), 0, "NotifyWake steps taken"},
    {"recheck_hits", T_ULONGLONG, offsetof(CountersObject, c.recheck_hits), 0, "lost wake-ups the recheck cap recovered"},
    {"timeouts", T_ULONGLONG, offsetof(CountersObject, c.timeouts), 0, "waits that timed out"},
    {"evictions", T_ULONGLONG, offsetof(CountersObject, c.evictions), 0, "dead readers the writer evicted"},
    {"signals", T_ULONGLONG, offsetof(CountersObject, c.signals), 0, "descriptor signals sent (NotifySignal)"},
    {NULL},
};

static void
plain_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyType_Slot counters_slots[] = {
    {Py_tp_doc, "Counters(): mutable counters of one queue side (the core bumps them; statistics() snapshots them)."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, plain_dealloc},
    {Py_tp_members, counters_members},
    {0, NULL},
};

static PyType_Spec counters_spec = {"ringcast._protocol.Counters", sizeof(CountersObject), 0, Py_TPFLAGS_DEFAULT, counters_slots};

typedef struct {
    PyObject_HEAD
    rc_cancel c;
    PyObject *endpoints; /* list of weak references to the endpoints to wake */
} CancelObject;

static PyObject *ep_wake_all(PyObject *ep, PyObject *unused); /* _protocol_endpoint.c */

/* set(): request the cancel, then wake every registered endpoint's sleepers */
static PyObject *
cancel_set(CancelObject *self, PyObject *unused)
{
    rc_cancel_set(&self->c);
    if (self->endpoints == NULL)
        Py_RETURN_NONE;
    PyObject *eps = PyList_GetSlice(self->endpoints, 0, PyList_GET_SIZE(self->endpoints)); /* a wake may run Python */
    if (eps == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(eps); k++) {
        PyObject *ep = PyWeakref_GetObject(PyList_GET_ITEM(eps, k));
        if (ep == NULL || ep == Py_None)
            continue;
        Py_INCREF(ep);
        PyObject *r = ep_wake_all(ep, NULL);
        Py_DECREF(ep);
        if (r == NULL) {
            Py_DECREF(eps);
            return NULL;
        }
        Py_DECREF(r);
    }
    Py_DECREF(eps);
    Py_RETURN_NONE;
}

static PyObject *
cancel_is_set(CancelObject *self, PyObject *unused)
{
    return PyBool_FromLong(rc_cancel_requested(&self->c));
}

static int
cancel_bool(CancelObject *self)
{
    return rc_cancel_requested(&self->c);
}

/* An endpoint built with this cancel: woken by set() (held weakly) */
static int
cancel_register(CancelObject *self, PyObject *ep)
{
    if (self->endpoints == NULL && (self->endpoints = PyList_New(0)) == NULL)
        return -1;
    PyObject *ref = PyWeakref_NewRef(ep, NULL);
    if (ref == NULL)
        return -1;
    int rc = PyList_Append(self->endpoints, ref);
    Py_DECREF(ref);
    return rc;
}

static int
cancel_traverse(CancelObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->endpoints);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int
cancel_clear(CancelObject *self)
{
    Py_CLEAR(self->endpoints);
    return 0;
}

static void
cancel_dealloc(CancelObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    cancel_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef cancel_methods[] = {
    {"set", (PyCFunction)cancel_set, METH_NOARGS, "Request the cancel (any thread) and wake the endpoints' sleepers."},
    {"is_set", (PyCFunction)cancel_is_set, METH_NOARGS, "Was the cancel requested?"},
    {NULL},
};

static PyType_Slot cancel_slots[] = {
    {Py_tp_doc, "Cancel(): a queue object's cancel request (shutdown()); true once set."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, cancel_dealloc},
    {Py_tp_traverse, cancel_traverse},
    {Py_tp_clear, cancel_clear},
    {Py_tp_methods, cancel_methods},
    {Py_nb_bool, cancel_bool},
    {0, NULL},
};

static PyType_Spec cancel_spec = {"ringcast._protocol.Cancel", sizeof(CancelObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, cancel_slots};
