"""POSIX shared-memory segments without the resource-tracker surprises, and process identity.

Why not ``multiprocessing.shared_memory.SharedMemory``: before Python 3.13 it registers every
segment it *opens* with the resource tracker, which then unlinks the writer's segment when a
reader exits (bpo-39959); vLLM works around it with ``unittest.mock.patch`` in production code.
Here the creator registers its segment with the tracker (so a creator killed by SIGKILL still
has its segment removed when the tracker notices), and an attaching process registers nothing.

Creating a segment reserves its pages with ``posix_fallocate`` so a full /dev/shm fails at
creation with :class:`ShmSpaceError`, never later with SIGBUS on first touch.
"""

from __future__ import annotations

import errno
import mmap
import os
import secrets
import stat

from .errors import HandleError, ShmSpaceError

try:
    import _posixshmem
except ImportError:  # pragma: no cover - non-POSIX platforms
    _posixshmem = None

__all__ = ["Segment", "shm_free_bytes", "process_start_time", "process_alive", "SHM_DIR"]

SHM_DIR = "/dev/shm"
NAME_PREFIX = "ringcast_"


def shm_free_bytes(shm_dir: str = SHM_DIR) -> int | None:
    """Bytes available to us in ``shm_dir``, or None where it cannot be told."""
    try:
        st = os.statvfs(shm_dir)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def _space_error(size: int, free: int | None, shm_dir: str) -> ShmSpaceError:
    have = "unknown" if free is None else _fmt(free)
    return ShmSpaceError(
        errno.ENOSPC,
        f"cannot create a {_fmt(size)} shared-memory segment: {shm_dir} has {have} free. "
        f"Lower max_chunks x max_chunk_bytes, free space in {shm_dir}, or give the container a larger "
        "/dev/shm (docker run --shm-size=...)",
    )


class Segment:
    """One named shared-memory mapping. ``Segment.create(size)`` or ``Segment.attach(name)``.

    ``close()`` unmaps (every process calls it); ``unlink()`` removes the name (only the creator
    calls it; after it, processes already attached keep their mapping). Both are idempotent.
    """

    # Class-level safe defaults so close()/unlink() work on a half-built object.
    name: str = ""
    size: int = 0
    created: bool = False
    buf = None  # mmap.mmap while open
    _unlinked: bool = True
    _registered: bool = False

    def __init__(self) -> None:  # use create() / attach()
        raise TypeError("use Segment.create(size) or Segment.attach(name)")

    @classmethod
    def create(cls, size: int, *, prefix: str = NAME_PREFIX, shm_dir: str = SHM_DIR, register: bool = True) -> "Segment":
        if _posixshmem is None:  # pragma: no cover
            raise OSError("POSIX shared memory is not available on this platform")
        free = shm_free_bytes(shm_dir)
        if free is not None and free < size:
            raise _space_error(size, free, shm_dir)
        self = object.__new__(cls)
        # Unguessable name, with our pid to help a human reading /dev/shm.
        for _ in range(8):
            name = f"{prefix}{os.getpid()}_{secrets.token_hex(8)}"
            try:
                fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
            except FileExistsError:  # pragma: no cover - 64 random bits
                continue
            break
        else:  # pragma: no cover
            raise FileExistsError(errno.EEXIST, "8 random shared-memory names in a row already existed")
        self.name, self.size, self.created, self._unlinked = name, size, True, False
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EFBIG):
                    raise _space_error(size, shm_free_bytes(shm_dir), shm_dir) from e
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # some filesystems lack fallocate
                    raise
                os.ftruncate(fd, size)
            self.buf = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            self.unlink()
            raise
        os.close(fd)
        if register:
            from multiprocessing import resource_tracker

            resource_tracker.register("/" + name, "shared_memory")
            self._registered = True
        return self

    @classmethod
    def attach(cls, name: str) -> "Segment":
        if not isinstance(name, str) or not name or "/" in name:
            raise HandleError(f"shared-memory name must be a non-empty str without '/', got {name!r}")
        self = object.__new__(cls)
        try:
            fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        except FileNotFoundError:
            raise HandleError(
                f"shared-memory segment {name!r} does not exist: the writer closed the queue, exited, or "
                "already unlinked the segment after every reader attached; attach before the writer's "
                "wait_until_ready() returns, with a handle from a live writer"
            ) from None
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                raise HandleError(f"shared-memory segment {name!r} is empty: not a ringcast segment")
            self.buf = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.name, self.size, self.created = name, size, False
        return self

    def close(self) -> None:
        """Unmap. Fails with BufferError while memoryviews of the mapping are still alive."""
        buf, self.buf = self.buf, None
        if buf is not None:
            try:
                buf.close()
            except BufferError:
                self.buf = buf
                raise

    def unlink(self) -> None:
        """Remove the name (creator only). Attached processes keep their mapping."""
        if self._unlinked or not self.created:
            return
        self._unlinked = True
        try:
            _posixshmem.shm_unlink("/" + self.name)
        except FileNotFoundError:
            pass
        if self._registered:
            from multiprocessing import resource_tracker

            resource_tracker.unregister("/" + self.name, "shared_memory")
            self._registered = False

    @property
    def closed(self) -> bool:
        return self.buf is None


def segment_mode(name: str) -> int:
    """Permission bits of a segment (for tests and diagnostics)."""
    return stat.S_IMODE(os.stat(os.path.join(SHM_DIR, name)).st_mode)


# -- process identity ---------------------------------------------------------------------------
# A pid alone is not an identity: pids are reused, and a SIGKILLed child that its parent has not
# reaped yet is a zombie that kill(pid, 0) still reports as alive. We record (pid, start time in
# clock ticks since boot, field 22 of /proc/PID/stat) and call a process alive only if that pid
# exists, is not a zombie, and started at the recorded time. Where /proc is missing, start time 0
# means "unknown" and we fall back to kill(pid, 0).
# Caveat: this assumes writer and readers share a PID namespace (true for processes of one
# container or one host; not across containers that share only /dev/shm).


def _proc_stat(pid: int) -> tuple[str, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = data[data.rindex(b")") + 2 :].split()
    return rest[0].decode(), int(rest[19])


def process_start_time(pid: int | None = None) -> int:
    st = _proc_stat(os.getpid() if pid is None else pid)
    return 0 if st is None else st[1]


def process_alive(pid: int, start: int) -> bool:
    if pid <= 0:
        return False
    st = _proc_stat(pid)
    if st is None:
        if os.path.isdir("/proc/self"):
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state, started = st
    if state in ("Z", "X", "x"):
        return False
    return start == 0 or started == start
