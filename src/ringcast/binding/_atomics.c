/* ringcast._atomics: the machine-level operations the Python side of the protocol calls.
 *
 * The primitives themselves live in rc_fences.h, shared with the protocol core (core/) and
 * the litmus tests of `ringcast stress` (_litmus.c), so what the stress suite tests on a CPU is
 * what the ring runs; this file only wraps some of them for Python.
 *
 * - fence(): a sequentially consistent fence (x86-64: `lock orq $0,(%rsp)` with GCC >= 11,
 *   mfence with older compilers; AArch64: `dmb ish`): the tensor arena's fences (arena.py). The
 *   ring's fences are inside the protocol core's steps and sequence (core/rc_steps.c, rc_core.c).
 *   tests/proofs/test_arm_codegen.py checks the AArch64 assembly of every fence point.
 * - load_u32(addr): an atomic 32-bit load (a diagnostic look at an eventcount word).
 * - address_of(buffer): the address of a writable buffer (the eventcount words' addresses).
 *
 * Addresses are plain integers (from address_of) so a call costs one METH_FASTCALL dispatch.
 * The caller guarantees the mapping outlives every call (ShmRingBuffer.close() stops using them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "../core/rc_fences.h"

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
    {"address_of", (PyCFunction)(void (*)(void))address_of, METH_FASTCALL, "Address of a writable buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_atomics", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__atomics(void)
{
    return PyModule_Create(&module);
}
