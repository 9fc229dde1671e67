"""Slow readers: one reader takes 0.2 ms per message, so the ring fills and the writer waits."""

SCENARIO = dict(
    name="slow_readers",
    description="3 local readers, reader 1 sleeps 200 us after every message; 4-chunk ring",
    stresses="Back-pressure: the writer finds the ring full, spins and parks on the readers' eventcount; "
    "the fast readers catch up and park too. Exercises writer waiting, reader-to-writer wake-ups and "
    "chunk reuse exactly when the last reader releases it.",
    readers=3,
    max_chunk_bytes=64 * 1024,
    max_chunks=4,
    duration=6.0,
    quick_duration=1.0,
    slow_readers={1: 200e-6},
    phases=[dict(name="flood-256B", kind="bytes", sizes=[256, 2048], pattern="flood")],
)
