"""Shared-memory segments: anonymous memfd or named POSIX (process identity is :mod:`.identity`).

``Segment.create(size, kind=...)`` makes one of two kinds; the :class:`Locator` names the kind:

``"memfd"`` (Linux): ``memfd_create`` makes a segment with no name in any filesystem. A peer opens
  it through ``/proc/<creator pid>/fd/<fd>``, which the kernel allows only to the creator's user
  in its PID namespace (the ptrace access check). Its pages count against the memory cgroup, not
  /dev/shm, and are freed when the last process holding it exits, however it exits. Seals:
  ``F_SEAL_SHRINK`` (no peer can truncate it and make the others fault with SIGBUS) and
  ``F_SEAL_SEAL`` (no seal can be added later). The creator writes a random token at file offset
  ``size``, past the mapped bytes; an attacher checks the creator's pid and start time, that the
  fd is a ringcast memfd of the right size sealed against shrinking, and the token, before it
  maps anything: a recycled pid or fd or a stale handle is a precise :class:`HandleError`.
``"posix"``: a named segment in /dev/shm (mode 0600, 64 random bits in the name). Not
  ``multiprocessing.shared_memory``: before Python 3.13 it registers every segment it *opens*
  with the resource tracker, which unlinks the writer's segment when a reader exits (bpo-39959).
  Here only the creator registers (a SIGKILLed creator's tracker removes the name).
``"auto"``: memfd where :func:`memfd_available`, else posix.

Memory on use: creating a segment checks that the whole of it would fit (memfd: the memory
cgroups and MemAvailable, :func:`memory_headroom`; posix: the free space of /dev/shm), sizes the
file without allocating it and reserves only its first page (where every ringcast layout keeps
its header). The creator reserves the rest with :meth:`Segment.reserve` (``posix_fallocate``)
before anything touches it: too little memory (or room in /dev/shm) is then a
:class:`ShmSpaceError` naming the numbers, never a SIGBUS on first touch. Creating costs
microseconds and no memory; a queue's pages come as its messages need them
(:mod:`ringcast.pages`).
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import secrets
import stat
import sys
import weakref
from dataclasses import replace

from .errors import HandleError, ShmSpaceError
from .headroom import fmt_bytes, memory_error, memory_headroom
from .identity import creator_problem, process_alive, process_start_time
from .locator import TOKEN_BYTES, Locator, is_int

try:
    import _posixshmem
except ImportError:  # pragma: no cover - non-POSIX platforms
    _posixshmem = None

__all__ = [
    "Segment",
    "is_int",
    "Locator",
    "can_attach",
    "check_attach",
    "memfd_available",
    "memory_headroom",
    "shm_free_bytes",
    "process_start_time",
    "process_alive",
    "SHM_DIR",
]

SHM_DIR = "/dev/shm"
NAME_PREFIX = "ringcast_"
KINDS = ("auto", "memfd", "posix")
MEMFD_NAME = "ringcast"  # what /proc/PID/fd/FD links to: "/memfd:ringcast (deleted)"
_MFD_NOEXEC_SEAL = getattr(os, "MFD_NOEXEC_SEAL", 0x0008)  # Linux 6.3+: never executable
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL if hasattr(fcntl, "F_SEAL_SHRINK") else 0


# -- room for a segment -------------------------------------------------------------------------


def shm_free_bytes(shm_dir: str = SHM_DIR) -> int | None:
    """Bytes available to us in ``shm_dir``, or None where it cannot be told."""
    try:
        st = os.statvfs(shm_dir)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _space_error(size: int, free: int | None, shm_dir: str) -> ShmSpaceError:
    have = "unknown" if free is None else fmt_bytes(free)
    return ShmSpaceError(
        errno.ENOSPC,
        f"cannot create a {fmt_bytes(size)} shared-memory segment: {shm_dir} has {have} free. "
        f"Lower max_chunks x max_chunk_bytes, free space in {shm_dir}, or give the container a larger "
        "/dev/shm (docker run --shm-size=...), or use an anonymous segment (kind='memfd'), which /dev/shm "
        "does not limit",
    )


# -- segments -----------------------------------------------------------------------------------


def _map(fd: int, size: int) -> mmap.mmap:
    """A shared read-write mapping. From Python 3.13 the mmap object keeps no duplicate of ``fd``
    (before, it holds one open for as long as it maps: one more descriptor per segment)."""
    return mmap.mmap(fd, size, **_NO_DUP)


_NO_DUP = {"trackfd": False} if sys.version_info >= (3, 13) else {}
_NO_MEMFD = (errno.ENOSYS, errno.EPERM, errno.EACCES, errno.EINVAL, errno.EOPNOTSUPP)


def memfd_available() -> bool:
    """Whether this process can make memfd segments that peers can open (memfd_create, sealing,
    and /proc to open them by)."""
    return hasattr(os, "memfd_create") and bool(_SEALS) and os.path.isdir(f"/proc/{os.getpid()}/fd")


class Segment:
    """One shared-memory mapping: ``Segment.create(size, kind=...)`` or ``Segment.attach(locator)``.

    ``seg.locator`` (a :class:`Locator`) is what peers attach with; ``seg.name`` is its string
    form (the /dev/shm name for ``posix``), which :meth:`attach` also takes. ``close()`` unmaps
    (every process calls it; the creator also closes its descriptors). ``unlink()`` (creator
    only) stops new peers from attaching: it removes a posix name, and closes the memfd
    descriptor the locator names; processes already attached keep their mapping. Both are
    idempotent. The creator keeps one private descriptor until ``close()``, for
    :meth:`reserve`: a process holding the handle cannot reach it (the locator names the closed
    one); only one that may ptrace the creator could open it through /proc, as it could read
    the creator's memory anyway.

    A segment dropped without ``close()`` is not kept until the process exits: when it is garbage
    collected, a finalizer closes the creator's descriptors, and the mapping goes with the last
    reference to ``buf`` (at once, or when the last memoryview of it dies). A posix name stays
    until ``unlink()`` (or the resource tracker, at exit).
    """

    # Class-level safe defaults so close()/unlink() work on a half-built object.
    name: str = ""
    kind: str = "posix"
    size: int = 0
    created: bool = False
    buf = None  # mmap.mmap while open
    _unlinked: bool = True
    _registered: bool = False
    #: The creator's descriptors: [the memfd one peers open through /proc/<pid>/fd/<fd> (-1 for
    #: posix, and once unlinked), a private one for reserve() (-1 once closed)]
    _fds: list | None = None
    _fd_finalizer: weakref.finalize | None = None  # closes _fds if the segment is collected first
    _locator: Locator | None = None

    def __init__(self) -> None:  # use create() / attach()
        raise TypeError("use Segment.create(size) or Segment.attach(locator)")

    @classmethod
    def create(cls, size: int, *, kind: str = "posix", register: bool = True) -> "Segment":
        """A new zero-filled segment of ``size`` bytes: room for all of it checked, its first
        page reserved, the rest reserved by :meth:`reserve` before first use. ``kind`` is
        "memfd", "posix" or "auto" (memfd where :func:`memfd_available`, else posix);
        ``register`` (with the resource tracker) applies to posix only."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if not is_int(size, 1):
            raise ValueError(f"segment size must be a positive int, got {size!r}")
        memfd = kind != "posix" and memfd_available()
        if kind == "posix" or (kind == "auto" and not memfd):
            return cls._create_posix(size, register)
        if not memfd:
            raise OSError(errno.ENOSYS, "kind='memfd' needs Linux memfd_create with sealing and a mounted /proc; use kind='posix'")
        try:
            return cls._create_memfd(size)
        except ShmSpaceError:
            raise
        except OSError as e:  # a sandbox may forbid memfd_create (seccomp): auto falls back
            if kind == "memfd" or e.errno not in _NO_MEMFD:
                raise
        return cls._create_posix(size, register)

    @classmethod
    def _create_memfd(cls, size: int) -> "Segment":
        total = size + TOKEN_BYTES
        headroom = memory_headroom()
        if headroom is not None and total > headroom[0]:
            raise memory_error(size, headroom)
        try:
            fd = os.memfd_create(MEMFD_NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | _MFD_NOEXEC_SEAL)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            fd = os.memfd_create(MEMFD_NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)  # before Linux 6.3
        self = object.__new__(cls)
        alloc = -1
        try:
            os.ftruncate(fd, total)
            try:
                os.posix_fallocate(fd, 0, min(size, PAGE))
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
                    raise memory_error(size, memory_headroom(), e.errno) from e
                raise
            token = secrets.token_bytes(TOKEN_BYTES)
            if os.pwrite(fd, token, size) != TOKEN_BYTES:  # pragma: no cover - tmpfs writes whole
                raise OSError(errno.EIO, "short write of the segment token")
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            self.buf = _map(fd, size)
            alloc = os.dup(fd)  # reserve() goes on after unlink() closed the descriptor peers open
        except BaseException:
            os.close(fd)
            raise
        self.kind, self.size, self.created, self._unlinked = "memfd", size, True, False
        self._own_fds(fd, alloc)
        self._locator = Locator("memfd", size=size, pid=os.getpid(), start=process_start_time(), fd=fd, token=token.hex())
        self.name = str(self._locator)
        return self

    @classmethod
    def _create_posix(cls, size: int, register: bool) -> "Segment":
        if _posixshmem is None:  # pragma: no cover
            raise OSError("POSIX shared memory is not available on this platform")
        free = shm_free_bytes()
        if free is not None and free < size:
            raise _space_error(size, free, SHM_DIR)
        self = object.__new__(cls)
        if register:  # start the tracker first: registering right after shm_open is then a pipe write
            from multiprocessing import resource_tracker

            resource_tracker.ensure_running()
        # Unguessable name, with our pid to help a human reading /dev/shm.
        for _ in range(8):
            name = f"{NAME_PREFIX}{os.getpid()}_{secrets.token_hex(8)}"
            try:
                fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
            except FileExistsError:  # pragma: no cover - 64 random bits
                continue
            break
        else:  # pragma: no cover
            raise FileExistsError(errno.EEXIST, "8 random shared-memory names in a row already existed")
        self.name, self.size, self.created, self._unlinked = name, size, True, False
        try:
            if register:  # before the (possibly long) fallocate: a SIGKILL from now on leaves no name
                resource_tracker.register("/" + name, "shared_memory")
                self._registered = True
            os.ftruncate(fd, size)
            try:
                os.posix_fallocate(fd, 0, min(size, PAGE))
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EFBIG):
                    raise _space_error(size, shm_free_bytes(), SHM_DIR) from e
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # some filesystems lack fallocate
                    raise
            self.buf = _map(fd, size)
        except BaseException:
            os.close(fd)
            self.unlink()
            raise
        self._own_fds(-1, fd)  # kept for reserve(), also after unlink() removed the name
        return self

    def _own_fds(self, peer_fd: int, alloc_fd: int) -> None:
        self._fds = fds = [peer_fd, alloc_fd]
        self._fd_finalizer = weakref.finalize(self, _close_fds, fds, (0, 1))
        self._fd_finalizer.atexit = False  # at exit the kernel closes them

    @property
    def _fd(self) -> int:
        """The memfd creator's descriptor that peers open (-1: none, or closed)."""
        return -1 if self._fds is None else self._fds[0]

    def reserve(self, offset: int, length: int, what: str = "") -> None:
        """Creator only: allocate the pages of bytes ``[offset, offset + length)`` now, so that
        touching them can never fault for lack of memory. Checks the room first (as
        :meth:`create` did for the whole segment: a memory cgroup near its limit fails here
        instead of waking its OOM killer) and raises :class:`ShmSpaceError` naming the numbers
        (and ``what`` the bytes are for) when they cannot be had; nothing is allocated then.
        Ranges up to ``CHECK_ROOM_ABOVE`` skip the check. Pages already reserved cost nothing;
        on a filesystem without ``fallocate`` it does nothing (the pages come on first touch)."""
        fd = -1 if self._fds is None else self._fds[1]
        if fd < 0:
            raise ValueError(f"reserve() is for the creator of an open segment; {self.name!r} is {'closed' if self.created else 'attached'}")
        if not (is_int(offset) and is_int(length) and offset + length <= self.size):
            raise ValueError(f"cannot reserve {length!r} bytes at offset {offset!r} of a {self.size}-byte segment")
        if length == 0:
            return
        room = None
        if length > CHECK_ROOM_ABOVE:  # a few pages: fallocate's own ENOMEM/ENOSPC suffices
            room = memory_headroom() if self.kind == "memfd" else _shm_room()
        if room is not None and length > room[0]:
            raise _reserve_error(self, offset, length, what, room[1], errno.ENOMEM if self.kind == "memfd" else errno.ENOSPC)
        try:
            os.posix_fallocate(fd, offset, length)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
                room = memory_headroom() if self.kind == "memfd" else _shm_room()
                raise _reserve_error(self, offset, length, what, "the kernel refused" if room is None else room[1], e.errno) from e
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise

    def allocated_bytes(self) -> int:
        """Creator only: bytes of the segment's file that have memory behind them now (tmpfs
        blocks; a memfd's include its token's page): what the segment costs."""
        fd = -1 if self._fds is None else self._fds[1]
        if fd < 0:
            raise ValueError(f"allocated_bytes() is for the creator of an open segment; {self.name!r} is not")
        return os.fstat(fd).st_blocks * 512

    @classmethod
    def attach(cls, locator: "Locator | str") -> "Segment":
        """Map the segment a :class:`Locator` (or its string form, or a bare /dev/shm name)
        describes. :class:`HandleError` if it is gone or is not the creator's segment."""
        loc = Locator.parse(locator)
        fd = _open_checked(loc)
        try:
            size = loc.size or os.fstat(fd).st_size
            buf = _map(fd, size)
        finally:
            os.close(fd)
        self = object.__new__(cls)
        self.kind, self.buf, self.size, self.created = loc.kind, buf, size, False
        self._locator = replace(loc, size=size)
        self.name = str(self._locator)
        return self

    @property
    def locator(self) -> Locator:
        return self._locator or Locator("posix", size=self.size, name=self.name)

    def close(self) -> None:
        """Unmap (and close the creator's memfd). BufferError while memoryviews of it are alive."""
        buf, self.buf = self.buf, None
        if buf is not None:
            try:
                buf.close()
            except BufferError:
                self.buf = buf
                raise
        self._close_fds((0, 1))

    def unlink(self) -> None:
        """Creator only: no new process can attach after it (posix: the name is removed; memfd: the
        descriptor peers open is closed). Attached processes, this one too, keep their mapping."""
        if self._unlinked or not self.created:
            return
        self._unlinked = True
        if self.kind == "memfd":
            self._close_fds((0,))
            return
        try:
            _posixshmem.shm_unlink("/" + self.name)
        except FileNotFoundError:
            pass
        if self._registered:
            from multiprocessing import resource_tracker

            resource_tracker.unregister("/" + self.name, "shared_memory")
            self._registered = False

    def _close_fds(self, which: tuple) -> None:
        """Close the creator's descriptors ``which`` (indices into ``_fds``), each once: a number
        closed here is never closed again (by this or by the finalizer, once it is another file's)."""
        if self._fds is not None:
            _close_fds(self._fds, which)
            if self._fds == [-1, -1] and self._fd_finalizer is not None:
                self._fd_finalizer.detach()
                self._fd_finalizer = None

    @property
    def closed(self) -> bool:
        return self.buf is None


PAGE = mmap.PAGESIZE
#: reserve() checks the room (memory cgroups and MemAvailable, or /dev/shm's free space: ~1 ms
#: of /proc and /sys reads) before it allocates more than this; smaller ranges go straight to
#: fallocate, whose ENOMEM/ENOSPC gives the same error.
CHECK_ROOM_ABOVE = 256 * 1024


def _close_fds(fds: list, which: tuple) -> None:
    for i in which:
        fd, fds[i] = fds[i], -1
        if fd >= 0:
            os.close(fd)


def _shm_room() -> tuple[int, str] | None:
    free = shm_free_bytes()
    return None if free is None else (free, f"{SHM_DIR} has {fmt_bytes(free)} free")


def _reserve_error(seg: "Segment", offset: int, length: int, what: str, why: str, err: int) -> ShmSpaceError:
    fix = ("give the container or cgroup more memory (memory.max), or lower max_chunks x max_chunk_bytes"
           if seg.kind == "memfd" else f"free space in {SHM_DIR} (docker run --shm-size=...), or use segment_kind='memfd'")
    return ShmSpaceError(
        err,
        f"cannot reserve {fmt_bytes(length)} of shared memory{' for ' + what if what else ''} (bytes {offset}..{offset + length} "
        f"of a {fmt_bytes(seg.size)} {seg.kind} segment): {why}. Nothing was written; {fix}",
    )


def segment_mode(name: str) -> int:
    """Permission bits of a posix segment (for tests and diagnostics)."""
    return stat.S_IMODE(os.stat(os.path.join(SHM_DIR, name)).st_mode)


# -- attaching safely ---------------------------------------------------------------------------


def _open_checked(loc: Locator) -> int:
    """An O_RDWR descriptor of the segment ``loc`` names, verified (nothing mapped yet)."""
    return _open_posix(loc) if loc.kind == "posix" else _open_memfd(loc)


def _open_posix(loc: Locator) -> int:
    """shm_open the segment and check it is the writer's: our user's, writable by no one else, the handle's size."""
    try:
        fd = _posixshmem.shm_open("/" + loc.name, os.O_RDWR, mode=0o600)
    except PermissionError as e:
        raise HandleError(f"cannot open shared-memory segment {loc.name!r}: {e.strerror}; it belongs to another user") from None
    except FileNotFoundError:
        raise HandleError(f"shared-memory segment {loc.name!r} does not exist: the writer closed the queue, exited, or "
                          "already unlinked the segment after every reader attached; attach before the writer's "
                          "wait_until_ready() returns, with a handle from a live writer") from None
    except OSError as e:  # EINVAL, ENAMETOOLONG, ...: not a name this system can open
        raise HandleError(f"cannot open shared-memory segment {loc.name!r}: {e.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        raise HandleError(
            f"shared-memory segment {loc.name!r} is not the writer's: it belongs to uid {st.st_uid} (we are "
            f"{os.geteuid()}) with mode {stat.filemode(st.st_mode)}; another user may have created a file under "
            "this name after the writer removed it. Refusing to map it; use a handle from a live writer"
        )
    if st.st_size == 0 or (loc.size and st.st_size != loc.size):
        os.close(fd)
        what = "empty" if st.st_size == 0 else f"{st.st_size} bytes, the handle says {loc.size}"
        raise HandleError(f"shared-memory segment {loc.name!r} is {what}: not the writer's ringcast segment")
    return fd


def _open_memfd(loc: Locator) -> int:
    """Open the creator's descriptor through /proc and check it: creator alive, ringcast memfd, size, seals, token."""
    where = f"memfd segment fd {loc.fd} of pid {loc.pid}"
    problem = creator_problem(loc.pid, loc.start)
    if problem:
        raise HandleError(f"cannot attach to {where}: {problem}; a reader needs a handle from a live writer on this host")
    path = f"/proc/{loc.pid}/fd/{loc.fd}"
    try:
        target = os.readlink(path)
        if not target.startswith(f"/memfd:{MEMFD_NAME} "):
            raise HandleError(
                f"cannot attach to {where}: the segment does not exist any more, that descriptor is now {target!r}; "
                "the creator closed it (close(), or unlink() once every reader attached) and reused the number"
            )
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise HandleError(
            f"cannot attach to {where}: the segment does not exist any more (the descriptor is closed): the creator "
            "closed it, or stopped admitting readers (unlink() once every reader attached); attach before the "
            "writer's wait_until_ready() returns"
        ) from None
    except PermissionError as e:
        raise HandleError(
            f"cannot attach to {where}: {e.strerror} opening {path}; only processes of the creator's user "
            "(and not in another container) may open it; run the reader as that user, or as a remote reader"
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != loc.size + TOKEN_BYTES:
            raise HandleError(
                f"cannot attach to {where}: it is {st.st_size} bytes, a ringcast segment of the handle's "
                f"{loc.size} bytes is {loc.size + TOKEN_BYTES}; the descriptor was reused for another segment"
            )
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        if not seals & fcntl.F_SEAL_SHRINK:
            raise HandleError(
                f"cannot attach to {where}: it is not sealed against shrinking (seals {seals:#x}), so a peer "
                "could truncate it under us (SIGBUS); ringcast seals every segment it creates"
            )
        if not secrets.compare_digest(os.pread(fd, TOKEN_BYTES, loc.size), bytes.fromhex(loc.token)):
            raise HandleError(
                f"cannot attach to {where}: its token does not match the handle's; the descriptor now holds "
                "another segment (the creator closed ours and reused the number) or the handle is stale"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_attach(locator: "Locator | str") -> None:
    """Raise :class:`HandleError` unless this process could attach to the segment: open it and
    check it (memfd: creator alive, ringcast memfd, size, seals, token) without mapping it."""
    os.close(_open_checked(Locator.parse(locator)))


def can_attach(locator: "Locator | str") -> bool:
    """Whether this process can open the creator's segment and read its token: the locality test
    (another user, container or PID namespace, or a dead creator, gives False)."""
    try:
        check_attach(locator)
    except HandleError:
        return False
    return True
