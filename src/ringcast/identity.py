"""Process identity: a pid together with its start time, which (unlike a pid alone) no other
process can have later.

A pid alone is not an identity: pids are reused, and a SIGKILLed child that its parent has not
reaped yet is a zombie that kill(pid, 0) still reports as alive. We record (pid, start time in
clock ticks since boot, field 22 of /proc/PID/stat) and call a process alive only if that pid
exists, is not a zombie, and started at the recorded time. Where /proc is missing, start time 0
means "unknown" and we fall back to kill(pid, 0).

A probe that cannot read /proc for a reason other than "no such process" (EMFILE when the
process is out of descriptors, EACCES, ...) knows nothing: :func:`process_alive` then answers
None (unknown), and no caller treats unknown as dead (no eviction, no DeadReaderError: they
retry and say why in their long-wait log).

Caveat: this assumes writer and readers share a PID namespace (true for processes of one
container or one host; not across containers that share only /dev/shm).

Used by :mod:`ringcast.shm` (a memfd segment is opened through its creator's /proc entry) and
the ring, roles and channel (dead peers); re-exported by :mod:`ringcast.shm`.
"""

from __future__ import annotations

import os

__all__ = ["process_start_time", "process_alive", "creator_problem", "UNKNOWN_WHY"]


#: What :func:`process_alive` says when /proc could not tell (see the module docstring).
UNKNOWN_WHY = "its liveness cannot be checked: /proc/PID/stat could not be read (out of file descriptors?)"


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """``(state, start time)`` of ``pid``, or None if no such process runs in this PID namespace.
    Any other failure to read (EMFILE, ENFILE, EACCES, ...) raises OSError: unknown, not gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = data[data.rindex(b")") + 2 :].split()
    return rest[0].decode(), int(rest[19])


def process_start_time(pid: int | None = None) -> int:
    try:
        st = _proc_stat(os.getpid() if pid is None else pid)
    except OSError:
        return 0  # unknown, as without /proc
    return 0 if st is None else st[1]


def process_alive(pid: int, start: int) -> bool | None:
    """True: ``(pid, start)`` runs. False: it is gone (exited, a zombie, or its pid reused).
    None: unknown (/proc could not be read, e.g. EMFILE); callers must not act as if it died."""
    if pid <= 0:
        return False
    try:
        st = _proc_stat(pid)
    except OSError:
        return None
    if st is not None:
        return _problem(pid, start, st) is None
    if os.path.isdir("/proc/self"):  # /proc answered: no such process
        return False
    try:  # no /proc at all: the pid alone is all we can check
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def creator_problem(pid: int, start: int) -> str | None:
    """Why process ``(pid, start)`` cannot be a segment's live creator, or None if it can."""
    try:
        st = _proc_stat(pid)
    except OSError as e:
        return f"cannot read /proc/{pid}/stat to check that the creator is alive ({e.strerror})"
    if st is None:
        return f"no process {pid} runs in this PID namespace (the creator exited, or runs in another container)"
    return _problem(pid, start, st)


def _problem(pid: int, start: int, st: tuple[str, int]) -> str | None:
    state, started = st
    if state in ("Z", "X", "x"):
        return f"process {pid} has exited"
    if start and started != start:
        return (
            f"pid {pid} now belongs to another process (started at clock tick {started}, the creator at "
            f"{start}): the creator exited and its pid was reused"
        )
    return None
