"""The segment layer on its own: both kinds' lifetime (close, unlink, a memfd segment dropped
without either), the vLLM-style name form, and the memory headroom of a real memory cgroup
(issue 15)."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from _procs import Children, memfd_holdings
from hypothesis import given
from hypothesis import strategies as st

from ringcast import HandleError
from ringcast import headroom as headroom_mod
from ringcast import shm
from ringcast.shm import Locator, Segment, can_attach

KINDS = ["memfd", "posix"] if shm.memfd_available() else ["posix"]


@pytest.mark.parametrize("kind", KINDS)
def test_unlink_stops_new_peers_and_keeps_mappings(kind):
    seg = Segment.create(8192, kind=kind)
    peer = Segment.attach(seg.name)
    try:
        peer.buf[:3] = b"abc"
        seg.unlink()
        seg.unlink()  # idempotent
        with pytest.raises(HandleError, match="does not exist"):
            Segment.attach(seg.locator)
        assert not can_attach(seg.name)
        assert bytes(seg.buf[:3]) == b"abc"
        seg.buf[3] = ord("d")
        assert bytes(peer.buf[:4]) == b"abcd"
    finally:
        peer.close()
        seg.close()
        seg.close()  # idempotent
        seg.unlink()


@pytest.mark.parametrize("kind", KINDS)
def test_close_with_a_live_view_keeps_the_segment(kind):
    seg = Segment.create(4096, kind=kind)
    view = memoryview(seg.buf)
    try:
        with pytest.raises(BufferError):
            seg.close()
        assert not seg.closed and can_attach(seg.locator)
    finally:
        view.release()
        seg.close()
        seg.unlink()
    assert seg.closed


def _holdings_of(seg) -> set[str]:
    """This process's descriptors and mappings of ``seg`` (a memfd creator's, by inode)."""
    inode = os.fstat(seg._fd).st_ino
    return {h for h in memfd_holdings() if h.endswith(f"@{inode}")}


@pytest.mark.skipif(not shm.memfd_available(), reason="needs memfd")
def test_a_dropped_memfd_segment_releases_its_descriptor_and_mapping():
    seg = Segment.create(4096, kind="memfd")
    loc, held = seg.locator, _holdings_of(seg)
    assert any(h.startswith("fd ") for h in held) and any(h.startswith("map ") for h in held), held
    assert can_attach(loc)
    del seg
    gc.collect()
    assert not (memfd_holdings() & held), "a collected segment still holds its memfd"
    assert not can_attach(loc)


@pytest.mark.skipif(not shm.memfd_available(), reason="needs memfd")
def test_a_dropped_segment_keeps_the_mapping_a_view_still_uses():
    seg = Segment.create(4096, kind="memfd")
    loc, held = seg.locator, _holdings_of(seg)
    view = memoryview(seg.buf)
    view[:3] = b"abc"
    del seg
    gc.collect()
    assert not can_attach(loc)  # the creator's descriptor is closed: no new peer
    assert bytes(view[:3]) == b"abc"
    assert {h for h in memfd_holdings() & held if h.startswith("map ")}
    view.release()
    gc.collect()
    assert not (memfd_holdings() & held)


@pytest.mark.skipif(not shm.memfd_available(), reason="needs memfd")
@pytest.mark.parametrize("release", ["close", "unlink"])
def test_collecting_a_closed_segment_closes_nothing_else(release):
    """After close()/unlink() the descriptor's number is free; collecting the segment later must
    not close whatever file took the number."""
    seg = Segment.create(4096, kind="memfd")
    number = seg._fd
    getattr(seg, release)()
    other = os.open(os.devnull, os.O_RDONLY)
    if other != number:  # the freed number now names another file
        os.dup2(other, number)
        os.close(other)
    try:
        del seg
        gc.collect()
        assert os.readlink(f"/proc/self/fd/{number}") == os.devnull
    finally:
        os.close(number)


_KEPT = []


def _child_keeps_a_segment():
    _KEPT.append(Segment.create(4096, kind="memfd"))
    return "done"


@pytest.mark.timeout(60)
@pytest.mark.skipif(not shm.memfd_available(), reason="needs memfd")
def test_a_child_returning_with_a_segment_open_fails():
    """The leak check of _procs.Children can fail: a child that returns holding a memfd segment."""
    with Children(timeout=30) as ch:
        ch.start("c", _child_keeps_a_segment)
        with pytest.raises(RuntimeError, match=r"_child_keeps_a_segment returned holding \d ringcast memfd segment\(s\) open: \['fd "):
            ch.wait()


def test_posix_locator_checks_the_size():
    seg = Segment.create(4096, kind="posix")
    try:
        assert seg.locator == Locator("posix", size=4096, name=seg.name)
        assert Segment.attach(seg.name).size == 4096  # a bare name (vLLM handles) takes the file's size
        with pytest.raises(HandleError, match=r"is 4096 bytes, the handle says 8192"):
            Segment.attach(Locator("posix", size=8192, name=seg.name))
        with pytest.raises(HandleError, match="does not exist"):
            Segment.attach("ringcast_0_0000000000000000")
    finally:
        seg.close()
        seg.unlink()


def test_create_validates_its_arguments():
    for size in (0, -1, 1.5, True, "4096"):
        with pytest.raises(ValueError, match="segment size must be a positive int"):
            Segment.create(size, kind="posix")
    with pytest.raises(TypeError, match="use Segment.create"):
        Segment()


_ints = st.one_of(st.integers(-5, 70000), st.sampled_from([os.getpid(), 1, 2**62, 2**63]))


@given(
    st.one_of(
        st.text(max_size=40),
        st.builds(lambda *f: "memfd/" + "/".join(map(str, f)), _ints, _ints, _ints, _ints, st.text("0123456789abcdefX", max_size=34)),
    )
)
def test_fuzzed_locators_give_handle_errors_only(text):
    """Whatever string arrives as a locator: HandleError (or a real segment), never another error
    and never a mapping of something that is not a ringcast segment."""
    try:
        seg = Segment.attach(text)
    except HandleError:
        assert not can_attach(text)
        return
    seg.close()  # pragma: no cover - a random string naming a live segment


def _memory_cgroup() -> tuple[str, str, str] | None:
    """This process's own memory cgroup directory and its (limit, usage) file names, if any."""
    dirs = headroom_mod._memory_cgroup_dirs()
    return dirs[0] if dirs else None


def _make_child_cgroup(limit: int) -> str | None:
    cg = _memory_cgroup()
    if cg is None or os.geteuid() != 0:
        return None
    d, limit_file, _ = cg
    child = os.path.join(d, f"ringcast-test-{os.getpid()}")
    try:
        os.mkdir(child)
    except OSError:
        return None
    try:
        with open(os.path.join(child, limit_file), "w") as f:
            f.write(str(limit))
    except OSError:
        os.rmdir(child)
        return None
    return child


@pytest.mark.timeout(60)
@pytest.mark.skipif(not shm.memfd_available(), reason="needs memfd")
def test_a_real_memory_cgroup_limits_memfd_segments():
    """A child moved into a cgroup limited to 64 MiB: a 16 MiB segment fits, a 160 MiB one fails at
    once with the cgroup named (never a trip to the OOM killer)."""
    child = _make_child_cgroup(64 << 20)
    if child is None:
        pytest.skip("cannot create a memory cgroup with a limit here (needs root and a writable cgroup hierarchy)")
    code = textwrap.dedent(
        f"""
        import os
        with open({os.path.join(child, "cgroup.procs")!r}, "w") as f:
            f.write(str(os.getpid()))
        from ringcast.shm import Segment, ShmSpaceError
        seg = Segment.create(16 << 20, kind="memfd")
        seg.buf[-1] = 1
        seg.close()
        try:
            Segment.create(160 << 20, kind="memfd")
        except ShmSpaceError as e:
            print("ERR", e)
        """
    )
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
    finally:
        os.rmdir(child)  # empty again: the child has exited
    assert r.returncode == 0, r.stderr
    assert f"cannot create a 160.0 MiB anonymous shared-memory segment: memory cgroup {child} has" in r.stdout
    assert "64.0 MiB" in r.stdout


@pytest.mark.timeout(60)
def test_posix_name_outlives_a_creator_killed_with_its_resource_tracker():
    """Why memfd is the default: SIGKILL a posix creator *and* its resource tracker (a whole
    process group dying at start-up) and the name stays in /dev/shm until someone removes it."""
    code = textwrap.dedent(
        """
        from multiprocessing import resource_tracker
        from ringcast.shm import Segment
        seg = Segment.create(4096, kind="posix")
        print(seg.name, resource_tracker._resource_tracker._pid, flush=True)
        import time; time.sleep(3600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    name = None
    try:
        name, tracker = proc.stdout.readline().split()
        os.kill(int(tracker), signal.SIGKILL)
        proc.kill()
        proc.wait(10)
        assert os.path.exists(f"/dev/shm/{name}"), "nobody is left to remove the name"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)
        if name:
            try:
                os.unlink(f"/dev/shm/{name}")
            except FileNotFoundError:
                pass


# -- memory on use: a segment's pages are reserved as they are needed ----------------------------------
MIB = 1 << 20


def _allocated(seg) -> int:
    """Bytes with memory behind them in a posix segment (tmpfs blocks), read off its name."""
    return os.stat(f"/dev/shm/{seg.name}").st_blocks * 512


@pytest.mark.parametrize("kind", ["memfd", "posix"])
def test_a_default_queue_costs_its_header_and_flags_not_its_ring(kind):
    """vLLM maps its ring lazily; ringcast reserved all of it at construction (240 MiB for a
    default queue). Now only the pages every side touches from the start are reserved."""
    if kind == "memfd" and not shm.memfd_available():
        pytest.skip("needs memfd")
    from ringcast import MessageQueue

    w = MessageQueue(1, 1, segment_kind=kind, enable_shm_tensor_arena=True)
    try:
        seg = w.buffer.segment
        assert seg.size > 240 * MIB
        assert seg.allocated_bytes() <= 3 * shm.PAGE  # header, flags (and the memfd's token)
        assert w.tensor_arena.arena.seg.allocated_bytes() <= 2 * shm.PAGE
        if kind == "posix":
            assert _allocated(seg) == seg.allocated_bytes()
    finally:
        w.close()


def test_pages_come_as_messages_need_them():
    from ringcast import MessageQueue

    w = MessageQueue(1, 1, max_chunks=4)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        seg = w.buffer.segment
        base = seg.allocated_bytes()
        for i in range(4):
            w.enqueue(b"x" * 200, timeout=5)
            assert r.dequeue(timeout=5) == b"x" * 200
        assert seg.allocated_bytes() - base <= 4 * 2 * shm.PAGE  # a page (two at a boundary) per chunk
        grown = seg.allocated_bytes()
        w.enqueue(bytes(MIB), timeout=5)
        assert r.dequeue(timeout=5) == bytes(MIB)
        assert MIB <= seg.allocated_bytes() - grown <= MIB + 4 * shm.PAGE
        with w.acquire_write(timeout=5) as view:  # the caller may write anywhere: all of the chunk
            view[-1] = 1
        assert seg.allocated_bytes() >= base + 24 * MIB
    finally:
        r.close()
        w.close()


def test_a_claim_that_cannot_get_its_pages_fails_naming_the_numbers(monkeypatch):
    """No SIGBUS and no silent overcommit: the headroom is checked for the whole ring at
    construction, and a chunk's pages are reserved (or refused, with the numbers) before the
    writer claims and fills it; a refused message leaves the ring as it was."""
    from ringcast import MessageQueue, ShmSpaceError

    w = MessageQueue(1, 1, max_chunk_bytes=4 * MIB, max_chunks=2, segment_kind="memfd" if shm.memfd_available() else "posix")
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        why = "memory cgroup /sys/fs/cgroup/x has 64.0 KiB left (memory.max 1.0 GiB, memory.current 1.0 GiB)"
        monkeypatch.setattr(shm, "memory_headroom", lambda: (64 << 10, why))
        monkeypatch.setattr(shm, "shm_free_bytes", lambda d=shm.SHM_DIR: 64 << 10)
        with pytest.raises(ShmSpaceError, match=r"cannot reserve 1\.0 MiB of shared memory for chunk 0 of the ring \(a message of "
                                                 r"\d+ bytes; max_chunk_bytes 4194304\) \(bytes \d+\.\.\d+ of a 8\.0 MiB") as e:
            w.enqueue(bytes(MIB - 100), timeout=5)
        assert ("64.0 KiB left" in str(e.value)) == (w.buffer.segment.kind == "memfd")
        with pytest.raises(TimeoutError):
            r.dequeue(timeout=0)  # nothing was published
        monkeypatch.undo()
        w.enqueue(bytes(MIB - 100), timeout=5)
        assert r.dequeue(timeout=5) == bytes(MIB - 100)
    finally:
        r.close()
        w.close()


def test_a_refused_chunk_gives_back_the_arena_slots_its_message_filled(monkeypatch):
    """The arena's buffers are placed before the ring chunk is reserved; when the chunk's pages
    cannot be had, the slots are given back (no ring chunk names them) and the arena goes on."""
    import numpy as np

    from ringcast import MessageQueue, ShmSpaceError

    w = MessageQueue(1, 1, max_chunk_bytes=2 * MIB, max_chunks=4, tensor_arena_bytes=4 * MIB, tensor_arena_slots=2)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    msg = {"array": np.ones(3 * MIB // 16, dtype=np.int64), "inline": bytes(600 << 10)}  # 1.5 MiB: the arena
    try:
        for _ in range(2):  # chunks 0 and 1 and both slots get their pages
            w.enqueue(msg, timeout=5)
            got = r.dequeue(timeout=5)
            assert got["array"].sum() == 3 * MIB // 16
            del got
        arena = w.tensor_arena
        hits = arena.hits
        why = "memory cgroup /sys/fs/cgroup/x has 64.0 KiB left (memory.max 1.0 GiB, memory.current 1.0 GiB)"
        monkeypatch.setattr(shm, "memory_headroom", lambda: (64 << 10, why))
        monkeypatch.setattr(shm, "shm_free_bytes", lambda d=shm.SHM_DIR: 64 << 10)
        with pytest.raises(ShmSpaceError, match="for chunk 2 of the ring"):
            w.enqueue(msg, timeout=5)
        assert arena.hits == hits
        assert all(arena.arena.flags(s)[1:] == b"\x01" for s in range(2))  # every slot free again
        monkeypatch.undo()
        w.enqueue(msg, timeout=5)
        assert r.dequeue(timeout=5)["inline"] == bytes(600 << 10) and arena.hits == hits + 1
    finally:
        r.close()
        w.close()
