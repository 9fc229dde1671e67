# The only job of this file: build the optional C helper (fences, futex). If a compiler is missing,
# `optional=True` lets the install go on and ringcast falls back to ctypes (see atomics.py).
from setuptools import Extension, setup

setup(ext_modules=[Extension("ringcast._atomics", ["src/ringcast/_atomics.c"], optional=True)])
