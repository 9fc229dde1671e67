"""Many readers: more readers than cores, default spin, then an idle second to measure idle CPU."""

import os

_CORES = os.cpu_count() or 2

SCENARIO = dict(
    name="many_readers",
    description=f"{2 * _CORES + 1} local readers on {_CORES} cores (default spin), decode-like 1 ms gaps, "
    "then bursts, then silence",
    stresses="Oversubscription: spinning readers steal the writer's core, so waiting must back off to "
    "parking quickly; wake-all of many sleepers; reader CPU while idle must be ~0 (parked, not spinning).",
    readers=2 * _CORES + 1,
    max_chunk_bytes=1 << 20,
    max_chunks=10,
    duration=6.0,
    quick_duration=1.0,
    idle=2.0,
    quick_idle=0.5,
    phases=[
        dict(name="gap-1ms", kind="dict", sizes=[256], pattern="gap", gap=0.001, share=1),
        dict(name="burst-16x", kind="dict", sizes=[256], pattern="burst", burst=16, gap=0.002, share=1),
    ],
)
