"""Keep ``__all__`` honest (anyio's test_all_attributes, in small) and the vLLM-compatible surface
present."""

from __future__ import annotations

import inspect

import ringcast
from ringcast import errors


def test_all_names_exist_and_public_classes_are_exported():
    for name in ringcast.__all__:
        assert hasattr(ringcast, name), name
    for name, obj in vars(errors).items():
        if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == errors.__name__:
            assert name in ringcast.__all__, f"{name} is public in ringcast.errors but not exported"


def test_vllm_compatible_surface():
    mq = ringcast.MessageQueue
    for method in ("export_handle", "create_from_handle", "create_from_process_group", "wait_until_ready", "enqueue",
                   "dequeue", "broadcast_object", "acquire_write", "acquire_read", "close"):
        assert callable(getattr(mq, method)), method
    params = list(inspect.signature(mq.__init__).parameters)[1:7]
    assert params == ["n_reader", "n_local_reader", "local_reader_ranks", "max_chunk_bytes", "max_chunks", "connect_ip"]
    assert list(inspect.signature(ringcast.ShmRingBuffer.__init__).parameters)[1:5] == ["n_reader", "max_chunk_bytes", "max_chunks", "name"]
    assert issubclass(ringcast.RingTimeoutError, TimeoutError)
