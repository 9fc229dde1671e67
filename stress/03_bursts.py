"""Bursts: 64 messages back-to-back, then 5 ms of nothing, repeated."""

SCENARIO = dict(
    name="bursts",
    description="3 local readers; bursts of 64 messages (more than the 8-chunk ring) separated by 5 ms gaps",
    stresses="Transitions between spinning and parking on both sides: a burst overruns the ring (writer "
    "waits), each gap lets every reader park, and the first message of the next burst must wake them all.",
    readers=3,
    max_chunk_bytes=256 * 1024,
    max_chunks=8,
    duration=6.0,
    quick_duration=1.0,
    phases=[dict(name="burst-64x", kind="bytes", sizes=[128, 1024, 16384], pattern="burst", burst=64, gap=0.005)],
)
