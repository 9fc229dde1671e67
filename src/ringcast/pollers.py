"""The descriptors of the descriptor wait: what ``MessageQueue.fileno()`` returns and how the other
side makes it readable, across processes, with no thread and no lost wake-up.

The protocol is the core's (src/ringcast/core/rc_poll.c, spec/Ring.tla ``PollArm``,
``PollRecheck``, ``PollDisarm``, ``NotifySignal``): a side that waits in an event loop arms a
poll flag in the mapping and re-checks; the other side's notify clears each armed flag and
signals that poller. This module is the poller's half of the signal's I/O; the notifier's half is
the binding's ``ep_signal`` (src/ringcast/binding/_protocol_endpoint.c):

* :class:`WakePipe`, the poller's own pipe: readable while it holds a byte. The poller drains it
  before it arms and re-checks, and writes a byte into it itself when the re-check finds it ready,
  so the pipe is readable exactly while the side's next operation would not wait (level-triggered;
  at most one stale byte per message, from a signal that crossed the poller's own drain).
* the notifier (C, no Python call on its path) opens the poller's write end once, through
  ``/proc/<poller pid>/fd/<fd>`` (the poll slot names the fd, the pipe's inode, which the opened
  file must match: a recycled pid or descriptor number is refused, and the pid), and writes one
  byte per signal. The kernel lets only the poller's own user (and root) open another process's
  descriptor, the same rule that protects the memfd segment: nothing another user can reach.
* :class:`Descriptor`, what ``fileno()`` is: an epoll set over the wake pipe, a pidfd per peer
  process (a peer that dies makes it readable: the next operation raises, naming the peer) and,
  for a remote reader, its socket's ``ZMQ_FD`` (edge-triggered by itself; the queue reads
  ``ZMQ_EVENTS`` after every wake-up and mirrors the answer into the pipe). An epoll descriptor is
  itself pollable, so the one number serves ``select``, ``selectors``, ``zmq.Poller`` and
  ``loop.add_reader``.

Why a pipe (docs/engine.md, "Waiting in an event loop", has the alternatives): an eventfd cannot
be opened through /proc (ENXIO), so it would have to travel over a Unix socket (SCM_RIGHTS), a
second channel beside the ZeroMQ one; a FIFO in the file system is a name to leak and to guard;
the futex has no descriptor form (FUTEX_FD was removed from Linux in 2.6.26).
"""

from __future__ import annotations

import os
import select
import weakref

from .identity import process_alive

__all__ = ["WakePipe", "Descriptor"]

_BYTE = b"\x01"


class WakePipe:
    """A poller's pipe. ``w`` and ``inode`` go into its poll slot before it arms."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.inode = os.fstat(self.r).st_ino

    def drain(self) -> None:
        """Read every byte (unreadable until the next signal)."""
        try:
            while os.read(self.r, 4096):
                pass
        except BlockingIOError:
            pass

    def light(self) -> None:
        """Make it readable (a full pipe is readable already)."""
        try:
            os.write(self.w, _BYTE)
        except BlockingIOError:
            pass

    def close(self) -> None:
        for fd in (self.r, self.w):
            os.close(fd)
        self.r = self.w = -1


def _close_all(epoll, pipe: WakePipe, peers: dict, dup: list) -> None:
    for fd in [*peers.values(), *dup]:
        os.close(fd)
    peers.clear()
    dup.clear()
    epoll.close()
    if pipe.r >= 0:
        pipe.close()


class Descriptor:
    """An epoll set over a :class:`WakePipe`, the peers' pidfds and extra descriptors (not owned).
    Its descriptors are closed by :meth:`close` or when it is collected (a finalizer: a queue
    keeps its Descriptor until the queue goes)."""

    def __init__(self) -> None:
        self.pipe = WakePipe()
        self._epoll = select.epoll()  # close-on-exec
        self._peers: dict[int, int] = {}  # key -> pidfd
        self._dup: list[int] = []  # loop_fileno()'s, once made
        self._close = weakref.finalize(self, _close_all, self._epoll, self.pipe, self._peers, self._dup)
        self._epoll.register(self.pipe.r, select.EPOLLIN)

    def fileno(self) -> int:
        return self._epoll.fileno()

    def loop_fileno(self) -> int:
        """A duplicate of :meth:`fileno` (the same epoll set under another number), made once: what
        the queue's own coroutines register with ``loop.add_reader``, which keeps one callback per
        number, so a caller's ``add_reader(q.fileno(), ...)`` in the same loop is neither replaced
        nor removed by them."""
        if not self._dup:
            self._dup.append(os.dup(self._epoll.fileno()))  # non-inheritable, as os.dup makes it
        return self._dup[0]

    def watch_process(self, key: int, pid: int, start: int) -> bool:
        """Readable once process ``pid`` (started at ``start``, clock ticks: :mod:`ringcast.identity`)
        exits. A process already gone (or its pid reused) makes it readable at once (an eventfd
        that stays readable stands for its pidfd), so the next call makes its checks and names
        it. False where no pidfd can be had at all (then the exit is seen only by the blocking
        waits' checks)."""
        if key in self._peers or not pid:
            return key in self._peers
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            fd = None
        except (OSError, AttributeError):  # no pidfd here (an old kernel, a seccomp filter)
            return False
        if fd is not None and process_alive(pid, start) is False:  # the pid is another process's now
            os.close(fd)
            fd = None
        if fd is None:
            fd = os.eventfd(1, os.EFD_CLOEXEC)  # readable for good, as the exited peer's pidfd would be
        self._peers[key] = fd
        self._epoll.register(fd, select.EPOLLIN)
        return True

    def unwatch(self, key: int) -> None:
        fd = self._peers.pop(key, None)
        if fd is not None:
            self._epoll.unregister(fd)
            os.close(fd)

    def watched(self) -> list[int]:
        return list(self._peers)

    def watch_fd(self, fd: int) -> None:
        self._epoll.register(fd, select.EPOLLIN)

    def peers_exited(self) -> bool:
        """Has a watched peer exited (its pidfd readable)? One system call."""
        if not self._peers:
            return False
        return bool(select.select(list(self._peers.values()), [], [], 0)[0])

    def close(self) -> None:
        self._close()
