"""Idle gaps: decode-like steps, one message then a 1 ms pause, readers parked between messages."""

SCENARIO = dict(
    name="idle_gaps",
    description="3 local readers; one ~256 B scheduler-like dict every 1 ms (default spin 100 us, so "
    "readers park between messages), then 2 s of silence",
    stresses="Park/wake on every message: the no-lost-wake-up protocol (eventcount) under the regime of an "
    "inference engine's decode loop; wake-up latency p99 and CPU while idle.",
    readers=3,
    max_chunk_bytes=1 << 20,
    max_chunks=10,
    duration=6.0,
    quick_duration=1.0,
    idle=2.0,
    quick_idle=0.5,
    phases=[dict(name="gap-1ms", kind="dict", sizes=[256], pattern="gap", gap=0.001)],
)
