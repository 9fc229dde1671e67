/* ringcast._atomics: the few machine-level operations the pure-Python ring cannot express.
 *
 * The primitives themselves (fence, atomics, futex) live in ringcast_fences.h, shared with the
 * litmus tests of `ringcast stress` (_litmus.c), so what the stress suite tests on a CPU is what
 * this module runs; this file only wraps them for Python. Which instructions they compile to, and
 * why F6W is an RMW *and* a fence, is written there.
 *
 * - fence(): a sequentially consistent fence (x86-64: `lock orq $0,(%rsp)` with GCC >= 11,
 *   mfence with older compilers; AArch64: `dmb ish`). CPython has no way to order plain stores to
 *   a shared mapping; see docs/protocol.md, "Fences", for which protocol steps need it and which
 *   TLC model shows what breaks without it.
 * - load_u32 / fence_load_u32 / fetch_add_u32: the eventcount words of the parking protocol
 *   (src/ringcast/waiting.py): fence_load_u32 is F6N + NotifyLoadWaiters, fetch_add_u32 is the
 *   seq_cst RMW followed by a full fence (F6W). tests/test_arm_codegen.py checks the AArch64
 *   assembly of every fence point.
 * - futex_wait / futex_wake: sleep on / wake a 32-bit word in the shared segment. The futex is
 *   process-shared (no FUTEX_PRIVATE_FLAG) because the waiters live in other processes.
 *
 * Addresses are plain integers (from address_of) so a call costs one METH_FASTCALL dispatch.
 * The caller guarantees the mapping outlives every call (RingBuffer.close() stops using them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "ringcast_fences.h"

static PyObject *
fence(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    rc_fence();
    Py_RETURN_NONE;
}

static int
get_addr(PyObject *obj, uint32_t **out)
{
    uintptr_t a = (uintptr_t)PyLong_AsUnsignedLongLong(obj);
    if (PyErr_Occurred())
        return -1;
    if (a % 4 != 0) {
        PyErr_Format(PyExc_ValueError, "address %p is not 4-byte aligned", (void *)a);
        return -1;
    }
    *out = (uint32_t *)a;
    return 0;
}

static PyObject *
load_u32(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t *p;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "load_u32(addr)");
        return NULL;
    }
    if (get_addr(args[0], &p) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(rc_load_u32(p));
}

/* fence_load_u32(addr): a full fence, then an atomic load: the notifier's F6N + NotifyLoadWaiters
 * in one call (it runs after every publish and every acknowledgement). */
static PyObject *
fence_load_u32(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t *p;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "fence_load_u32(addr)");
        return NULL;
    }
    if (get_addr(args[0], &p) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(rc_fence_load_u32(p));
}

static PyObject *
fetch_add_u32(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t *p, old;
    long delta;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "fetch_add_u32(addr, delta)");
        return NULL;
    }
    if (get_addr(args[0], &p) < 0)
        return NULL;
    delta = PyLong_AsLong(args[1]);
    if (delta == -1 && PyErr_Occurred())
        return NULL;
    old = rc_fetch_add_u32(p, (uint32_t)delta); /* F6W: the RMW, then a full fence */
    return PyLong_FromUnsignedLong(old);
}

/* futex_wait(addr, expected, timeout_seconds) -> 0 woken, 1 value differed, 2 timed out, 3 interrupted */
static PyObject *
futex_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
#ifdef __linux__
    uint32_t *p;
    unsigned long expected;
    double timeout;
    struct timespec ts;
    int rc, err;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "futex_wait(addr, expected, timeout)");
        return NULL;
    }
    if (get_addr(args[0], &p) < 0)
        return NULL;
    expected = PyLong_AsUnsignedLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
    timeout = PyFloat_AsDouble(args[2]);
    if (PyErr_Occurred())
        return NULL;
    if (!(timeout >= 0.0)) {
        PyErr_SetString(PyExc_ValueError, "futex_wait timeout must be >= 0");
        return NULL;
    }
    ts.tv_sec = (time_t)timeout;
    ts.tv_nsec = (long)((timeout - (double)ts.tv_sec) * 1e9);
    Py_BEGIN_ALLOW_THREADS
    rc = rc_futex_wait(p, (uint32_t)expected, &ts);
    err = errno;
    Py_END_ALLOW_THREADS
    if (rc >= 0)
        return PyLong_FromLong(rc);
    errno = err;
    return PyErr_SetFromErrno(PyExc_OSError);
#else
    PyErr_SetString(PyExc_NotImplementedError, "futex is Linux-only");
    return NULL;
#endif
}

static PyObject *
futex_wake(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
#ifdef __linux__
    uint32_t *p;
    long n, rc;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "futex_wake(addr, n)");
        return NULL;
    }
    if (get_addr(args[0], &p) < 0)
        return NULL;
    n = PyLong_AsLong(args[1]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    rc = rc_futex_wake(p, (int)n);
    if (rc < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong(rc);
#else
    PyErr_SetString(PyExc_NotImplementedError, "futex is Linux-only");
    return NULL;
#endif
}

static PyObject *
address_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    PyObject *res;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "address_of(buffer)");
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0)
        return NULL;
    res = PyLong_FromVoidPtr(view.buf);
    PyBuffer_Release(&view);
    return res;
}

static PyMethodDef methods[] = {
    {"fence", (PyCFunction)(void (*)(void))fence, METH_FASTCALL, "Sequentially consistent memory fence."},
    {"load_u32", (PyCFunction)(void (*)(void))load_u32, METH_FASTCALL, "Atomic 32-bit load."},
    {"fence_load_u32", (PyCFunction)(void (*)(void))fence_load_u32, METH_FASTCALL, "Full fence, then atomic 32-bit load."},
    {"fetch_add_u32", (PyCFunction)(void (*)(void))fetch_add_u32, METH_FASTCALL, "Atomic fetch-and-add, then a full fence; returns the old value."},
    {"futex_wait", (PyCFunction)(void (*)(void))futex_wait, METH_FASTCALL, "Sleep while *addr == expected."},
    {"futex_wake", (PyCFunction)(void (*)(void))futex_wake, METH_FASTCALL, "Wake up to n sleepers on addr."},
    {"address_of", (PyCFunction)(void (*)(void))address_of, METH_FASTCALL, "Address of a writable buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_atomics", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__atomics(void)
{
    return PyModule_Create(&module);
}
