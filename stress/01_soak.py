"""Soak: a long, steady mix of message kinds and sizes, as fast as the readers keep up."""

SCENARIO = dict(
    name="soak",
    description="2 local readers; back-to-back scheduler-like dicts, small and medium blobs, and numpy arrays",
    stresses="Long-run correctness: ring wrap-around many thousand times, every chunk state transition, "
    "counter and sequence arithmetic, slow leaks (a lost wake-up or a stale chunk shows up as loss/reorder/corruption).",
    readers=2,
    max_chunk_bytes=1 << 20,
    max_chunks=10,
    duration=16.0,
    quick_duration=1.5,
    phases=[
        dict(name="dict-256B", kind="dict", sizes=[256], pattern="flood", share=2),
        dict(name="bytes-mixed", kind="bytes", sizes=[16, 256, 4096, 65536], pattern="flood", share=1),
        dict(name="numpy-64KiB", kind="numpy", sizes=[65536], pattern="flood", share=1),
    ],
)
