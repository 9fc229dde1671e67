"""A writer and its readers in one process (the readers' handshakes on threads), for tests that
drive both sides from one thread."""

from __future__ import annotations

import pickle
import threading

from ringcast import MessageQueue


class Group:
    """``n_reader`` local readers (and ``remote`` remote ones on 127.0.0.1, cleartext) of one writer;
    ``kw`` goes to the writer and every reader (the wait policy's knobs)."""

    def __init__(self, n_reader=2, mcb=256, chunks=2, evict_dead_readers=False, remote=0, **kw):
        extra = {"connect_ip": "127.0.0.1", "remote_insecure": True} if remote else {}
        self.w = MessageQueue(n_reader + remote, n_reader, max_chunk_bytes=mcb, max_chunks=chunks,
                              evict_dead_readers=evict_dead_readers, **extra, **kw)
        h = pickle.loads(pickle.dumps(self.w.export_handle()))
        self.rs = [MessageQueue.create_from_handle(h, i, **kw) for i in range(n_reader + remote)]
        ts = [threading.Thread(target=r.wait_until_ready, args=(10,)) for r in self.rs]
        for t in ts:
            t.start()
        self.w.wait_until_ready(10)
        for t in ts:
            t.join()

    def close(self):
        for q in [self.w, *self.rs]:
            q.close()
