/* _steps.h: the lab's test extension ringcast_lab._steps (src/ringcast_lab/steps/_steps.c), built
 * on the runtime's own C: the protocol core (src/ringcast/core/rc_core.c: every step, the
 * eventcount) and the binding's Side (src/ringcast/binding/_protocol_side.c: a side's mapping,
 * core state and interface), included by relative path, so a single step here is the very code an
 * endpoint runs. The runtime's binding has production entry points only; the test and tool
 * surfaces are here:
 *
 *   WriterSteps(ring), ReaderSteps(ring, r)  one side's single steps (the core's rc_step: one spec
 *                                            action each, its tracepoint included), a movable index
 *   EventCount(seq_addr, waiters_addr)       the eventcount's steps on words at fixed addresses
 *   _plant(endpoint, name)                   a planted bug of tests/stateful in an endpoint of the
 *                                            planted test build (-DRINGCAST_TEST_PLANTED,
 *                                            tests/stateful/builds.py), which shares the Side layout
 *
 * The tracepoints of this extension's copy of the core call the runtime's step hook
 * (ringcast.steps.get_step_hook(), read at each step: a test extension, not a hot path). */
#ifndef RINGCAST_LAB_STEPS_H
#define RINGCAST_LAB_STEPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "../../ringcast/core/rc_fences.h"
#define RC_SINGLE_STEPS 1 /* the core's single steps, rc_single.c: this extension's alone */
#include "../../ringcast/core/rc_core.c"

static PyObject *get_step_hook; /* ringcast.steps.get_step_hook, read at module init */

static PyObject *
current_hook(void)
{
    PyObject *h = PyObject_CallNoArgs(get_step_hook);
    if (h == Py_None)
        Py_CLEAR(h);
    return h;
}

#include "../../ringcast/binding/_protocol_side.c"

/* A side of single steps: a Side with an interface of its own (no observer: the steps that need
 * one, WriterSendOverflow and ReaderRecvOverflow, are the endpoints') */
typedef Side Steps;

/* The runtime's endpoint types, by name (the planted test build's have the same) */
#define RC_WRITER_ENDPOINT "ringcast._protocol._WriterEndpoint"
#define RC_READER_ENDPOINT "ringcast._protocol._ReaderEndpoint"

#endif /* RINGCAST_LAB_STEPS_H */
