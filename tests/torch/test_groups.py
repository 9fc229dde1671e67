"""ringcast.groups without torch.distributed: a group of threads in one process (the protocol is
duck-typed: rank, world_size, broadcast_obj, all_gather_obj), and the argument checks."""

from __future__ import annotations

import pytest

from ringcast import MessageQueue
from ringcast.groups import as_object_group, queue_for, queue_from_group

from _thread_group import run_group as _run


@pytest.mark.timeout(90)
@pytest.mark.parametrize("writer_rank", [0, 2])
def test_queue_over_a_group_of_threads(writer_rank):
    remote = (writer_rank + 1) % 3

    def member(g):
        mq = queue_from_group(MessageQueue, g, 1 << 20, 4, writer_rank, connect_ip="127.0.0.1", timeout=20, force_remote=g.rank == remote)
        try:
            if g.rank == writer_rank:
                assert queue_for(g, writer_rank) is mq and queue_for(g, remote) is None
            role = "writer" if mq.is_writer else ("local" if mq.is_local_reader else "remote")
            got = [mq.broadcast_object(i if mq.is_writer else None) for i in range(3)]
            g.all_gather_obj(None)  # every member has read before anyone closes
            return role, got
        finally:
            mq.close()

    res = _run(3, member)
    for r, (role, got) in enumerate(res):
        assert got == [0, 1, 2]
        assert role == ("writer" if r == writer_rank else "remote" if r == remote else "local")


def test_argument_checks():
    class Solo:
        rank, world_size = 0, 1

        def broadcast_obj(self, obj, src):
            return obj

        def all_gather_obj(self, obj):
            return [obj]

    with pytest.raises(ValueError, match="single member"):
        queue_from_group(MessageQueue, Solo(), 1 << 20, 4)
    with pytest.raises(ValueError, match="writer_rank"):
        queue_from_group(MessageQueue, Solo(), 1 << 20, 4, writer_rank=1)
    with pytest.raises(TypeError, match="lacks broadcast_obj, all_gather_obj"):
        as_object_group(object())
    outsider = Solo()
    outsider.rank = -1
    with pytest.raises(ValueError, match="not a member"):
        queue_from_group(MessageQueue, outsider, 1 << 20, 4)
