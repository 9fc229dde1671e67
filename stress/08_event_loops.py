"""Event loops: readers that wait on the queue's descriptor (issue 51), one of them cancelled at random."""

SCENARIO = dict(
    name="event_loops",
    description="2 local readers and 1 remote: one polls fileno() with select, one awaits dequeue_async under "
    "random cancellation, the remote one awaits dequeue_async too; bursts with 1 ms gaps, so they sleep on "
    "the descriptor between bursts",
    stresses="The descriptor wait (PollArm / PollRecheck / NotifySignal): no lost wake-up when a reader is in an "
    "event loop instead of parked, and no message lost, doubled or reordered by a cancelled await.",
    readers=2,
    remote_readers=1,
    max_chunk_bytes=1 << 16,
    max_chunks=6,
    duration=6.0,
    quick_duration=1.5,
    waits={0: "poll", 1: "asyncio", 2: "asyncio"},
    phases=[
        dict(name="bursts-1ms", kind="dict", sizes=[256, 4096], pattern="burst", burst=8, gap=0.001, share=2),
        dict(name="flood", kind="bytes", sizes=[64, 1 << 17], pattern="flood"),
    ],
)
