/* ringcast_lab._litmus: litmus tests of the protocol's fence shapes (every fence point but F8), run on this CPU.
 *
 * The TLA+ models (spec/) prove the protocol correct *given* that each fence point is a full
 * fence; this module checks, on the machine in front of it, that the shipped primitives of
 * rc_fences.h (the very inline functions ringcast._atomics wraps for the Python code) stop
 * the reordering each fence point is there for. Two threads meet at a spin barrier before every
 * iteration and run one shape on fresh words (one word per iteration, in batches), in tight
 * compiled loops, as litmus7 (herdtools) and jcstress do. Plain protocol accesses (the payload,
 * written, the read flags: the core's memcpy and relaxed rc_load_u8 / rc_store_u8) are relaxed
 * atomics here, which compile to plain loads and stores.
 *
 * Shapes (docs/spec.md, "Litmus tests"; F-names as in docs/protocol.md, "Fences"):
 *   eventcount   notifier: flag = 1; F6N+load waiters -> r0  |  waiter: F6W RMW waiters += 1; r1 = flag
 *                forbidden r0 == 0 && r1 == 0 (each misses the other: a lost wake-up)
 *   mp           writer: payload = 1; F3; written = 1       |  reader: w = written; F4; p = payload
 *                forbidden w == 1 && p == 0 (the new flag with an old payload)
 *   mp_readflag  writer: payload = 1; F7; read flag = 0     |  reader: f = read flag; F4; p = payload
 *                forbidden f == 0 && p == 0 (the cleared flag with an old payload)
 *   rtr          reader: p = payload; F5; read = 1          |  writer: c = read; F1; payload = 2
 *                forbidden c == 1 && p == 2 (the reader saw bytes written after its own release)
 * A run is either shipped (every fence as ringcast ships it) or the control of one fence point:
 * that one fence replaced by a compiler-only barrier, to show how often this CPU produces the
 * forbidden outcome when nothing stops it.
 *
 * futex_hunt runs the parking protocol itself with the real futex, between two processes over a
 * shared memfd: the waiter announces (F6W), re-checks the flag and sleeps with a short timeout; the
 * notifier publishes the flag, F6N, loads waiters and wakes. A lost wake-up is a sleep that ended
 * by its timeout while the flag was set *and* the notifier had seen no waiter.
 *
 * Test-only switches, one per call-site fence point (F6N and F6W: see rc_fences.h):
 * -DRINGCAST_TEST_DROP_F1 / _F3 / _F4 / _F5 / _F7 turn that point's fence into a compiler barrier
 * in the shipped runs. setup.py never passes them; build_info()["dropped"] names any that is set.
 * -DRINGCAST_LITMUS_STANDALONE builds a command-line program instead of the Python module
 * (tests/proofs/test_litmus.py builds throwaway copies that way).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#ifndef RINGCAST_LITMUS_STANDALONE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#endif
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "../../ringcast/core/rc_fences.h"

/* ------------------------------------------------------------------ fence points and shapes -- */

enum { P_NONE = 0, P_F1, P_F3, P_F4, P_F5, P_F6N, P_F6W, P_F7, N_POINTS };
static const char *const POINT_NAMES[N_POINTS] = {"", "F1", "F3", "F4", "F5", "F6N", "F6W", "F7"};

#ifdef RINGCAST_TEST_DROP_F1
#define DROP_F1 1
#else
#define DROP_F1 0
#endif
#ifdef RINGCAST_TEST_DROP_F3
#define DROP_F3 1
#else
#define DROP_F3 0
#endif
#ifdef RINGCAST_TEST_DROP_F4
#define DROP_F4 1
#else
#define DROP_F4 0
#endif
#ifdef RINGCAST_TEST_DROP_F5
#define DROP_F5 1
#else
#define DROP_F5 0
#endif
#ifdef RINGCAST_TEST_DROP_F7
#define DROP_F7 1
#else
#define DROP_F7 0
#endif

/* The fence points whose fence this build compiled out ("" in a shipped build). */
static const char DROPPED[] = RC_DROPPED_IN_HEADER
#if DROP_F1
    "F1 "
#endif
#if DROP_F3
    "F3 "
#endif
#if DROP_F4
    "F4 "
#endif
#if DROP_F5
    "F5 "
#endif
#if DROP_F7
    "F7 "
#endif
    "";

/* A ring fence point (rc_fence(), as the core's RC_Fk() calls it); in the control of
 * that point (or where a test-only switch dropped it) a compiler-only barrier. */
RC_INLINE void
at_point(int point, int ctl)
{
    int drop = (point == P_F1 && DROP_F1) || (point == P_F3 && DROP_F3) || (point == P_F4 && DROP_F4) ||
               (point == P_F5 && DROP_F5) || (point == P_F7 && DROP_F7);
    if (point == ctl || drop)
        rc_compiler_barrier();
    else
        rc_fence();
}

/* F6N + NotifyLoadWaiters as shipped, or its control (no fence before the load). */
RC_INLINE uint32_t
notify_load_waiters(uint32_t *w, int ctl)
{
    if (ctl == P_F6N) {
        rc_compiler_barrier();
        return rc_load_u32(w);
    }
    return rc_fence_load_u32(w);
}

/* ParkAnnounce (F6W) as shipped, or its control (the seq_cst RMW alone). */
RC_INLINE void
park_announce(uint32_t *w, int ctl)
{
    if (ctl == P_F6W) {
        rc_rmw_add_u32(w, 1);
        rc_compiler_barrier();
    } else {
        rc_fetch_add_u32(w, 1);
    }
}

RC_INLINE void
st(uint32_t *p, uint32_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}

RC_INLINE uint32_t
ld(uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

enum { S_EVENTCOUNT, S_MP, S_MP_READFLAG, S_RTR, N_SHAPES };

struct shape_info {
    const char *name;
    int points[2];
    uint32_t flag_init;
    const char *forbidden;
};

static const struct shape_info SHAPES[N_SHAPES] = {
    {"eventcount", {P_F6N, P_F6W}, 0,
     "r0 == 0 && r1 == 0: the notifier saw no waiter and the waiter's re-check missed the publish (a lost wake-up)"},
    {"mp", {P_F3, P_F4}, 0, "written == 1 && payload == old: the reader copies the previous message"},
    {"mp_readflag", {P_F7, P_F4}, 1, "read flag cleared && payload == old: the reader copies the previous message"},
    {"rtr", {P_F5, P_F1}, 0, "read == 1 seen by the claim && the reader loaded the next payload: a torn copy"},
};

/* The two-thread runs, the futex hunt and the build's description, in three files of this one
 * translation unit (they share the fence points, the shapes and the helpers above). */
#include "_litmus_runs.c"
#include "_litmus_hunt.c"
#include "_litmus_build.c"

/* ---------------------------------------------------------------------------- front ends -- */

#ifdef RINGCAST_LITMUS_STANDALONE

/* litmus run SHAPE POINT|- ITERATIONS BUDGET_S [stop]   -> "done forbidden aborted yielded"
 * litmus hunt 0|1 ITERATIONS BUDGET_S SLEEP_TIMEOUT_S   -> "done sleeps wakes lost late aborted"
 * litmus info                                           -> one "key: value" per line */
int
main(int argc, char **argv)
{
    if (argc >= 6 && strcmp(argv[1], "run") == 0) {
        struct result res;
        int s = shape_index(argv[2]);
        int p = s < 0 ? -1 : point_index(s, argv[3]);
        if (s < 0 || p < 0) {
            fprintf(stderr, "unknown shape or fence point: %s %s\n", argv[2], argv[3]);
            return 2;
        }
        int err = litmus_run(s, p, strtoull(argv[4], NULL, 10), atof(argv[5]), argc > 6 && strcmp(argv[6], "stop") == 0, &res);
        if (err) {
            fprintf(stderr, "litmus_run: %s\n", strerror(err));
            return 1;
        }
        printf("%llu %llu %d %llu\n", (unsigned long long)res.done, (unsigned long long)res.forbidden, res.aborted,
               (unsigned long long)(res.yielded[0] + res.yielded[1]));
        return 0;
    }
    if (argc >= 6 && strcmp(argv[1], "hunt") == 0) {
        struct hunt_result h;
        int err = futex_hunt(atoi(argv[2]), strtoull(argv[3], NULL, 10), atof(argv[4]), atof(argv[5]), &h);
        if (err) {
            fprintf(stderr, "futex_hunt: %s\n", strerror(err));
            return 1;
        }
        printf("%llu %llu %llu %llu %llu %d\n", (unsigned long long)h.done, (unsigned long long)h.sleeps,
               (unsigned long long)h.wakes, (unsigned long long)h.lost, (unsigned long long)h.late, h.aborted);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "info") == 0) {
        char buf[256];
        printf("compiler: %s\narch: %s\ndropped: %s\n", compiler_name(), arch_name(), DROPPED);
        describe_code((const void *)probe_fence, buf, sizeof buf);
        printf("fence: %s\n", buf);
        describe_code((const void *)probe_f6n, buf, sizeof buf);
        printf("fence_load_u32: %s\n", buf);
        describe_code((const void *)probe_f6w, buf, sizeof buf);
        printf("fetch_add_u32: %s\n", buf);
        return 0;
    }
    fprintf(stderr, "usage: %s run SHAPE POINT|- ITERATIONS BUDGET_S [stop] | hunt 0|1 ITERATIONS BUDGET_S TIMEOUT_S | info\n", argv[0]);
    return 2;
}

#else /* the Python module */

static PyObject *
py_run(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"shape", "control", "iterations", "budget_s", "stop_at_first", NULL};
    const char *shape, *control = NULL;
    unsigned long long iterations;
    double budget;
    int stop = 0, err;
    struct result res;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "szKd|p", names, &shape, &control, &iterations, &budget, &stop))
        return NULL;
    int s = shape_index(shape);
    if (s < 0)
        return PyErr_Format(PyExc_ValueError, "unknown litmus shape %R", PyTuple_GET_ITEM(args, 0));
    int p = point_index(s, control);
    if (p < 0)
        return PyErr_Format(PyExc_ValueError, "shape %s has no fence point %s (it has %s and %s)", shape, control,
                            POINT_NAMES[SHAPES[s].points[0]], POINT_NAMES[SHAPES[s].points[1]]);
    if (!(budget > 0.0))
        return PyErr_Format(PyExc_ValueError, "budget_s must be > 0, got %S", PyTuple_GET_ITEM(args, 3));
    Py_BEGIN_ALLOW_THREADS
    err = litmus_run(s, p, iterations, budget, stop, &res);
    Py_END_ALLOW_THREADS
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("{s:K,s:K,s:K,s:O}", "iterations", (unsigned long long)res.done, "forbidden",
                         (unsigned long long)res.forbidden, "yielded",
                         (unsigned long long)(res.yielded[0] + res.yielded[1] < res.done ? res.yielded[0] + res.yielded[1] : res.done),
                         "aborted", res.aborted ? Py_True : Py_False);
}

static PyObject *
py_futex_hunt(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"control", "iterations", "budget_s", "sleep_timeout_s", NULL};
    int ctl, err;
    unsigned long long iterations;
    double budget, sleep_timeout;
    struct hunt_result h;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "pKdd", names, &ctl, &iterations, &budget, &sleep_timeout))
        return NULL;
    if (!(budget > 0.0) || !(sleep_timeout > 0.0))
        return PyErr_Format(PyExc_ValueError, "budget_s and sleep_timeout_s must be > 0");
    Py_BEGIN_ALLOW_THREADS
    err = futex_hunt(ctl, iterations, budget, sleep_timeout, &h);
    Py_END_ALLOW_THREADS
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:O,s:i}", "iterations", (unsigned long long)h.done,
                         "yielded", (unsigned long long)h.yielded,
                         "sleeps", (unsigned long long)h.sleeps, "rechecks", (unsigned long long)h.rechecks, "wakes",
                         (unsigned long long)h.wakes, "woken", (unsigned long long)h.woken, "timeouts_flag_set",
                         (unsigned long long)h.timeouts_flag_set, "lost", (unsigned long long)h.lost, "late",
                         (unsigned long long)h.late, "errors", (unsigned long long)h.errors, "aborted",
                         h.aborted ? Py_True : Py_False, "child_status", h.child_status);
}

static PyObject *
py_shapes(PyObject *self, PyObject *unused)
{
    PyObject *out = PyList_New(0);
    for (int s = 0; out != NULL && s < N_SHAPES; s++) {
        PyObject *d = Py_BuildValue("{s:s,s:(ss),s:s}", "shape", SHAPES[s].name, "points",
                                    POINT_NAMES[SHAPES[s].points[0]], POINT_NAMES[SHAPES[s].points[1]], "forbidden",
                                    SHAPES[s].forbidden);
        if (d == NULL || PyList_Append(out, d) < 0) {
            Py_XDECREF(d);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(d);
    }
    return out;
}

static PyObject *
py_build_info(PyObject *self, PyObject *unused)
{
    char fence[256], f6n[256], f6w[256];
    describe_code((const void *)probe_fence, fence, sizeof fence);
    describe_code((const void *)probe_f6n, f6n, sizeof f6n);
    describe_code((const void *)probe_f6w, f6w, sizeof f6w);
    return Py_BuildValue("{s:s,s:s,s:s,s:s,s:s,s:s}", "compiler", compiler_name(), "arch", arch_name(), "fence", fence,
                         "fence_load_u32", f6n, "fetch_add_u32", f6w, "dropped", DROPPED);
}

static PyMethodDef methods[] = {
    {"run", (PyCFunction)(void (*)(void))py_run, METH_VARARGS | METH_KEYWORDS,
     "run(shape, control, iterations, budget_s, stop_at_first=False) -> {iterations, forbidden, yielded, aborted}.\n"
     "yielded: iterations in which a side had to give up its CPU at the barrier (the sides did not run together;\n"
     "near `iterations` when they took turns on one CPU).\n"
     "control None: shipped fences; a fence point name (e.g. 'F6N'): that fence replaced by a compiler barrier."},
    {"futex_hunt", (PyCFunction)(void (*)(void))py_futex_hunt, METH_VARARGS | METH_KEYWORDS,
     "futex_hunt(control, iterations, budget_s, sleep_timeout_s) -> counts of the parking protocol between two processes."},
    {"shapes", py_shapes, METH_NOARGS, "The litmus shapes: name, its two fence points, the forbidden outcome."},
    {"build_info", py_build_info, METH_NOARGS, "Compiler, architecture, the instructions of the fences, dropped switches."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_litmus", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__litmus(void)
{
    return PyModule_Create(&module);
}
#endif
