"""The allocator state a benchmark process runs in, stated and set on purpose.

glibc's malloc serves a request of at least its *mmap threshold* with a fresh ``mmap`` (zero-filled
pages: one minor fault per 4 KiB on first touch, and a ``munmap`` on free). The threshold starts at
128 KiB and moves: freeing an mmapped chunk of size S (up to 32 MiB) raises it to S. So the cost of
an allocator-heavy send depends on the largest chunk the process happened to free before:

* a process whose only large frees were 1 MiB objects (``ringcast bench``'s writer before it called
  :func:`warm_allocator`: the pickle baseline and the payloads) has its threshold at 1,052,672
  bytes. vLLM's ``enqueue`` of a dict holding 1 MiB of ``bytes`` grows an ``io.BytesIO`` to
  1,183,744 bytes, above it: every message maps, faults (258 minor faults) and unmaps 1.1 MiB, ~4x
  the time of the same ``enqueue`` on reused heap memory;
* a process that has freed any multi-MiB buffer, such as any process that has used torch on the CPU
  (a freed 4 MiB tensor puts the threshold at 4 MiB), serves such requests from heap memory that
  is already faulted in.

:func:`warm_allocator` puts a process in the second state (one 16 MiB ``bytearray`` allocated and
freed); :func:`torch_heap` builds a realistic heap of a torch process (torch imported, a small model
run, tensors of a few MiB freed, ~60 MB of live Python objects). :func:`minor_faults` is the
counter the benchmarks report per message so that the state shows in the results.
"""

from __future__ import annotations

import resource

__all__ = ["warm_allocator", "torch_heap", "minor_faults", "HEAPS", "apply_heap"]

_kept: list = []


def minor_faults() -> int:
    """This process's minor page faults so far (``getrusage``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def warm_allocator(nbytes: int = 16 << 20) -> None:
    """Allocate and free one ``nbytes`` buffer (below glibc's 32 MiB cap on the dynamic mmap
    threshold): later requests up to that size come from the heap, as in a process that has used
    large buffers before."""
    b = bytearray(nbytes)
    del b


def torch_heap() -> None:
    """A torch process's heap: torch imported, a small MLP run on the CPU, 1-16 MiB tensors freed,
    and ~60 MB of small Python objects kept alive for the life of the process."""
    import torch

    m = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)])
    with torch.no_grad():
        for batch in (16, 64, 256):
            m(torch.randn(batch, 1024))
    for mib in (1, 4, 16):
        t = torch.empty(mib << 18)  # float32: mib MiB
        t.fill_(1.0)
        del t
    _kept.append(m)
    _kept.append([{"id": i, "name": f"req-{i}", "tokens": list(range(i % 32))} for i in range(200_000)])


HEAPS = {"clean": None, "warm": warm_allocator, "torch": torch_heap}


def apply_heap(name: str) -> None:
    """Put this process in the named state: ``clean`` (whatever the imports left), ``warm``
    (:func:`warm_allocator`), ``torch`` (:func:`torch_heap`)."""
    if name not in HEAPS:
        raise ValueError(f"heap must be one of {sorted(HEAPS)}, got {name!r}")
    f = HEAPS[name]
    if f is not None:
        f()
