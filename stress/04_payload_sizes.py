"""Payload sizes across the overflow boundary: inline, exactly at the limit, one byte over, huge."""

SCENARIO = dict(
    name="payload_sizes",
    description="2 local readers, 64 KiB chunks; pickles of exactly max_chunk_bytes-3 .. max_chunk_bytes "
    "bytes (inline vs overflow by one byte), empty payloads, out-of-band numpy arrays that just fit or "
    "just overflow, and 1 MiB messages over the overflow socket",
    stresses="The inline/overflow decision and the ordering of overflow markers with their socket "
    "payloads (a marker must always pair with its own payload, in ring order), interleaved with inline "
    "messages; out-of-band buffers copied into the chunk.",
    readers=2,
    max_chunk_bytes=64 * 1024,
    max_chunks=6,
    duration=8.0,
    quick_duration=1.5,
    phases=[
        dict(name="boundary", kind="bytes", sizes="boundary", pattern="flood", share=2),
        dict(name="tiny+huge", kind="bytes", sizes=[0, 1, 1 << 20, 100, 65536], pattern="flood", share=1),
        dict(name="numpy-oob", kind="numpy", sizes=[1000, 65000, 65600, 1 << 20], pattern="flood", share=1),
    ],
)
