"""Local plus remote readers: two on shared memory, two over loopback TCP."""

SCENARIO = dict(
    name="local_remote",
    description="2 local (shared memory) + 2 remote (TCP on 127.0.0.1) readers; paced at 5000 msg/s, "
    "mixed sizes including overflowing ones",
    stresses="The writer's two paths per message (ring and TCP socket) in one enqueue, overflow to local "
    "readers interleaved with whole messages to remote ones; remote readers have no back-pressure, so the "
    "writer is paced to keep their socket queues bounded.",
    readers=2,
    remote_readers=2,
    max_chunk_bytes=64 * 1024,
    max_chunks=8,
    duration=6.0,
    quick_duration=1.0,
    phases=[dict(name="paced-5k", kind="bytes", sizes=[256, 4096, 100000], pattern="rate", rate=5000)],
)
