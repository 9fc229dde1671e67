"""What a MessageQueue owns, released when the queue is collected without ``close()``.

vLLM's ``MessageQueue`` has no ``close()``, so code written for it drops queues and lets the
garbage collector have them, often inside a reference cycle (an exception stored beside the
queue, a bound method kept by a callback). Left to themselves, the queue's ZeroMQ context and
sockets die in that same collection in no fixed order; pyzmq's ``Context.__del__`` then calls
``term()``, which waits for sockets that are garbage but not closed: ``gc.collect()`` never
returns. vLLM 0.33 guards against it the same way (``_close_zmq_on_collect``).

:func:`release_on_collect` registers a ``weakref.finalize`` on the queue that holds the context,
the sockets, the CURVE authenticator and the writer's segments (strongly, so none of them is part
of the queue's cycle), and that runs when the queue is collected, in whatever thread collects it:

* every socket gets ``LINGER 0`` and is closed: queued messages to readers that never read them
  are dropped instead of waited for (``close()`` flushes them, for up to ``channel``'s linger);
* the authenticator is stopped and the context terminated: it has no open socket left, so
  ``term()`` returns at once. If the collection runs in the authenticator's own thread (the
  garbage collector can start in any thread that allocates), a new thread does this part: a
  thread cannot join itself;
* the writer's segment names (ring and tensor arena) are removed; the mappings go with the last
  reference to them, and a memfd's descriptor with its own finalizer.

It takes no lock (the collecting thread may hold any lock of the queue's) and touches nothing
that another thread can be using: an operation in progress holds a reference to the queue, so
the queue cannot be collected under it. ``MessageQueue.close()`` detaches the finalizer and
releases the same things itself.
"""

from __future__ import annotations

import threading
import weakref

import zmq

from . import channel

__all__ = ["release_on_collect"]


def release_on_collect(queue, ctx, sockets, auth, ipc_path: str | None, segments) -> weakref.finalize:
    """Release ``ctx``, ``sockets`` (None entries skipped), ``auth`` and the local socket file
    ``ipc_path``, and unlink ``segments`` (objects with ``unlink()``, None skipped), when
    ``queue`` is collected. Returns the finalizer: call ``detach()`` on it when closing by hand.
    Not run at interpreter exit (as vLLM's): the process's end releases all of it."""
    fin = weakref.finalize(queue, _release, ctx, [s for s in sockets if s is not None], auth, ipc_path,
                           [s for s in segments if s is not None])
    fin.atexit = False
    return fin


def _release(ctx, sockets: list, auth, ipc_path: str | None, segments: list) -> None:
    for s in sockets:
        s.setsockopt(zmq.LINGER, 0)
    if auth is not None and threading.current_thread() is getattr(auth, "thread", None):
        # Collected in the authenticator's own thread (its ZAP handler allocated): stop() would
        # join the current thread, and the context cannot terminate while that thread holds its
        # sockets. A new thread does both once the handler has returned and the thread ended.
        threading.Thread(target=channel.close_all, args=(sockets, auth, ctx, ipc_path), name="ringcast-release",
                         daemon=True).start()
    else:
        channel.close_all(sockets, auth, ctx, ipc_path)
    for seg in segments:
        seg.unlink()

