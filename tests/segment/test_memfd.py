"""Anonymous (memfd) segments: attach across processes, refuse foreign or stale handles, keep the
seals, leave nothing behind when processes die, and ignore /dev/shm's size (issue 15)."""

from __future__ import annotations

import errno
import fcntl
import os
import pickle
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap

import pytest

from ringcast import HandleError, ShmSpaceError
from ringcast import headroom as headroom_mod
from ringcast import shm
from ringcast.shm import Locator, Segment, can_attach, check_attach

from _procs import Children, can_mount_small_shm, python_under_small_shm

pytestmark = pytest.mark.skipif(not shm.memfd_available(), reason="needs Linux memfd_create with sealing and /proc")


# -- helpers ------------------------------------------------------------------------------------


def _memfd_maps(pid="self") -> int:
    """How many mappings of ringcast memfds process ``pid`` has."""
    with open(f"/proc/{pid}/maps") as f:
        return sum(1 for line in f if "/memfd:ringcast " in line)


def _holders(ino: int) -> list[str]:
    """Every process that holds the memfd inode ``ino`` open or mapped (memfds live on one
    internal tmpfs, so the inode number names the file)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            with open(f"/proc/{pid}/maps") as f:
                if any("/memfd:ringcast " in line and line.split()[4] == str(ino) for line in f):
                    out.append(f"{pid} maps it")
        except OSError:  # gone meanwhile, or not ours to look at
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:ringcast ") and os.stat(f"/proc/{pid}/fd/{fd}").st_ino == ino:
                    out.append(f"{pid} fd {fd}")
            except OSError:  # closed meanwhile
                continue
    return out


def _occupy(fd: int, src: int) -> None:
    """Make descriptor number ``fd`` refer to what ``src`` refers to, as a reused number would."""
    if src != fd:
        os.dup2(src, fd, inheritable=False)


def _names_of(*pids: int) -> set[str]:
    """The /dev/shm names processes ``pids`` created (other tests' segments run concurrently)."""
    return {n for n in os.listdir("/dev/shm") if any(n.startswith(f"ringcast_{pid}_") for pid in pids)}


def _python(code: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=10)


# -- children (spawned: module-level functions) -------------------------------------------------


def child_echo(locator):
    """Attach, read what the creator wrote, answer in the other half."""
    seg = Segment.attach(pickle.loads(locator))
    try:
        got = bytes(seg.buf[:5])
        seg.buf[seg.size - 6 :] = b"answer"
        return got, seg.kind, seg.size
    finally:
        seg.close()


def child_truncate(path, new_size):
    """Open the segment as a peer would and try to shrink it, then to grow it."""
    fd = os.open(path, os.O_RDWR)
    try:
        try:
            os.ftruncate(fd, new_size)
            shrunk = "shrank"
        except OSError as e:
            shrunk = errno.errorcode[e.errno]
        return shrunk, os.fstat(fd).st_size
    finally:
        os.close(fd)


def child_as_nobody(locator):
    nobody = pwd.getpwnam("nobody")
    os.setgroups([])
    os.setgid(nobody.pw_gid)
    os.setuid(nobody.pw_uid)
    try:
        check_attach(locator)
    except HandleError as e:
        return False, str(e)
    return True, ""


# -- across processes ---------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["memfd", "posix"])
def test_create_attach_across_a_spawned_process(kind):
    seg = Segment.create(256 << 10, kind=kind)
    try:
        assert seg.kind == kind and seg.locator.kind == kind and str(Locator.parse(seg.name)) == seg.name == str(seg.locator)
        seg.buf[:5] = b"hello"
        with Children(timeout=30) as ch:
            ch.start("c", child_echo, pickle.dumps(seg.locator))
            got = ch.wait()["c"]
        assert got == (b"hello", kind, 256 << 10)
        assert bytes(seg.buf[-6:]) == b"answer"
    finally:
        seg.close()
        seg.unlink()


def test_memfd_segment_is_sealed_and_unnamed():
    seg = Segment.create(4096, kind="memfd")
    try:
        assert _names_of(os.getpid()) == set()
        assert os.readlink(f"/proc/self/fd/{seg.locator.fd}") == "/memfd:ringcast (deleted)"
        seals = fcntl.fcntl(seg.locator.fd, fcntl.F_GET_SEALS)
        assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_SEAL
        assert not seals & (fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
        assert os.get_inheritable(seg.locator.fd) is False
        with pytest.raises(PermissionError):  # F_SEAL_SEAL: nobody adds a seal later
            fcntl.fcntl(seg.locator.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_GROW)
        assert len(seg.buf) == 4096  # the token sits past the mapped bytes
    finally:
        seg.close()
    assert seg.closed and seg._fd == -1


@pytest.mark.timeout(60)
def test_a_peer_cannot_shrink_the_segment_and_nobody_gets_sigbus():
    seg = Segment.create(1 << 20, kind="memfd")
    try:
        path = f"/proc/{os.getpid()}/fd/{seg.locator.fd}"
        with Children(timeout=30) as ch:
            ch.start("c", child_truncate, path, 4096)
            shrunk, size = ch.wait()["c"]
        assert shrunk == "EPERM" and size == (1 << 20) + shm.TOKEN_BYTES
        seg.buf[-1] = 7  # the last mapped page is still there: no SIGBUS
        assert seg.buf[-1] == 7 and can_attach(seg.locator)
    finally:
        seg.close()


# -- stale and foreign handles ------------------------------------------------------------------


def test_handle_with_a_dead_or_reused_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(10)
    seg = Segment.create(4096, kind="memfd")
    try:
        loc = seg.locator
        dead = Locator("memfd", size=loc.size, pid=proc.pid, start=0, fd=loc.fd, token=loc.token)
        with pytest.raises(HandleError, match=rf"no process {proc.pid} runs in this PID namespace"):
            Segment.attach(dead)
        reused = Locator("memfd", size=loc.size, pid=loc.pid, start=loc.start + 1, fd=loc.fd, token=loc.token)
        with pytest.raises(HandleError, match=rf"pid {loc.pid} now belongs to another process.*reused"):
            Segment.attach(reused)
        assert not can_attach(dead) and not can_attach(reused)
    finally:
        seg.close()


def test_handle_whose_fd_was_reused():
    seg, other = Segment.create(4096, kind="memfd"), Segment.create(4096, kind="memfd")
    loc = seg.locator
    seg.unlink()  # closes the descriptor readers open: the number is free again
    maps = _memfd_maps()
    try:
        with pytest.raises(HandleError, match=rf"fd {loc.fd} of pid {os.getpid()}: the segment does not exist any more \(the descriptor is closed\)"):
            Segment.attach(loc)
        tmp = os.open(tempfile.gettempdir(), os.O_TMPFILE | os.O_RDWR, 0o600)
        _occupy(loc.fd, tmp)
        try:
            with pytest.raises(HandleError, match=r"does not exist any more, that descriptor is now '/tmp/#\d+ \(deleted\)'"):
                Segment.attach(loc)
        finally:
            os.close(loc.fd)
            if tmp != loc.fd:
                os.close(tmp)
        _occupy(loc.fd, other.locator.fd)  # another ringcast segment of the same size
        try:
            with pytest.raises(HandleError, match=r"token does not match"):
                Segment.attach(loc)
            big = Locator("memfd", size=8192, pid=loc.pid, start=loc.start, fd=loc.fd, token=loc.token)
            with pytest.raises(HandleError, match=r"it is 4112 bytes, a ringcast segment of the handle's 8192 bytes is 8208"):
                Segment.attach(big)
        finally:
            os.close(loc.fd)
        assert _memfd_maps() == maps, "a refused attach must map nothing"
        # seg itself still works for the creator: unlink() only stopped new peers
        seg.buf[0] = 1
    finally:
        seg.close()
        other.close()


def test_wrong_token_maps_nothing():
    seg = Segment.create(4096, kind="memfd")
    try:
        loc = seg.locator
        bad = Locator("memfd", size=loc.size, pid=loc.pid, start=loc.start, fd=loc.fd, token="0" * 32)
        maps = _memfd_maps()
        with pytest.raises(HandleError, match=r"its token does not match the handle's"):
            Segment.attach(str(bad))
        assert _memfd_maps() == maps and not can_attach(bad) and can_attach(loc)
    finally:
        seg.close()


def test_unsealed_memfd_is_refused():
    fd = os.memfd_create("ringcast", os.MFD_CLOEXEC)
    try:
        token = os.urandom(shm.TOKEN_BYTES)
        os.ftruncate(fd, 4096 + shm.TOKEN_BYTES)
        os.pwrite(fd, token, 4096)
        loc = Locator("memfd", size=4096, pid=os.getpid(), start=shm.process_start_time(), fd=fd, token=token.hex())
        with pytest.raises(HandleError, match=r"not sealed against shrinking"):
            Segment.attach(loc)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "text, match",
    [
        ("memfd/1/2/3", "malformed memfd locator"),
        ("memfd/x/0/3/4096/" + "0" * 32, "malformed memfd locator"),
        ("memfd/1/0/3/0/" + "0" * 32, "invalid size"),
        ("memfd/1/0/3/4096/xyz", "invalid token"),
        ("", "non-empty"),
        (Locator("tmpfs", size=1, name="x"), "kind must be"),
        (Locator("posix", name="a/b"), "without '/'"),
    ],
)
def test_malformed_locators(text, match):
    with pytest.raises(HandleError, match=match):
        Segment.attach(text)
    assert not can_attach(text)


# -- who can attach (locality) ------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become nobody")
def test_another_user_cannot_attach():
    seg = Segment.create(4096, kind="memfd")
    try:
        with Children(timeout=30) as ch:
            ch.start("c", child_as_nobody, seg.locator)
            ok, msg = ch.wait()["c"]
        assert not ok and "only processes of the creator's user" in msg
    finally:
        seg.close()


def _can_unshare(*flags) -> bool:
    return bool(shutil.which("unshare")) and subprocess.run(["unshare", *flags, "true"], capture_output=True).returncode == 0


@pytest.mark.timeout(60)
@pytest.mark.skipif(not _can_unshare("--pid", "--fork", "--mount-proc"), reason="needs permission to unshare a PID namespace")
def test_another_pid_namespace_cannot_attach():
    seg = Segment.create(4096, kind="memfd")
    try:
        code = f"from ringcast.shm import can_attach; print(can_attach({str(seg.locator)!r}), can_attach({seg.name!r}))"
        r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["False", "False"]
        assert can_attach(seg.locator)
    finally:
        seg.close()


# -- death leaves nothing -----------------------------------------------------------------------

_CREATOR = """
    import os, sys, time
    from ringcast.shm import Segment
    seg = Segment.create(8 << 20, kind="auto")
    seg.buf[:] = b"x" * len(seg.buf)
    print(seg.name, os.stat(f"/proc/self/fd/{seg.locator.fd}").st_ino, flush=True)
    time.sleep(3600)
"""


_READER = """
    import sys, time
    from ringcast.shm import Segment
    seg = Segment.attach(sys.argv[1])
    print(seg.buf[len(seg.buf) - 1], flush=True)
    time.sleep(3600)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", ["before-any-reader", "after-a-reader-attached", "every-process"])
def test_sigkill_the_creator_leaves_nothing(case):
    """The creator (and, in the last case, its reader too) SIGKILLed: nothing in /dev/shm, and
    once no live process holds the file or a mapping of it the kernel frees it."""
    procs = [_python(_CREATOR)]
    reader = None
    try:
        name, ino = procs[0].stdout.readline().split()
        assert name.startswith("memfd/"), "auto picks memfd here"
        ino = int(ino)
        if case == "after-a-reader-attached":
            reader = Segment.attach(name)
        elif case == "every-process":
            procs.append(subprocess.Popen([sys.executable, "-c", textwrap.dedent(_READER), name], stdout=subprocess.PIPE, text=True))
            assert procs[1].stdout.readline().strip() == str(ord("x"))
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)
        assert _names_of(*(p.pid for p in procs)) == set(), "no name in /dev/shm, ever"
        with pytest.raises(HandleError, match="no process"):
            check_attach(name)
        if reader is not None:  # the reader's mapping keeps the memory alive, intact
            assert reader.buf[len(reader.buf) - 1] == ord("x")
            held = _holders(ino)
            assert held and all(h.startswith(f"{os.getpid()} ") for h in held), held
            reader.close()
            reader = None
        assert _holders(ino) == [], "nobody holds the file: the kernel has freed it"
    finally:
        for p in procs:
            _stop(p)
        if reader is not None:
            reader.close()


@pytest.mark.timeout(60)
def test_sigkill_a_reader_leaves_the_segment():
    seg = Segment.create(1 << 20, kind="memfd")
    seg.buf[-1] = ord("x")
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_READER), seg.name], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == str(ord("x"))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        ino = os.fstat(seg.locator.fd).st_ino
        assert all(h.startswith(f"{os.getpid()} ") for h in _holders(ino))
        assert can_attach(seg.locator) and seg.buf[-1] == ord("x")
    finally:
        _stop(proc)
        seg.close()


# -- space --------------------------------------------------------------------------------------


def test_space_check_names_the_limit(monkeypatch):
    monkeypatch.setattr(shm, "memory_headroom", lambda: (1 << 20, "memory cgroup /sys/fs/cgroup/x has 1.0 MiB left (memory.max 2.0 MiB, memory.current 1.0 MiB)"))
    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(ShmSpaceError, match=r"cannot create a 4\.0 MiB anonymous shared-memory segment: memory cgroup /sys/fs/cgroup/x has 1\.0 MiB left") as e:
        Segment.create(4 << 20, kind="memfd")
    assert e.value.errno == errno.ENOMEM and "/dev/shm's size does not matter" in str(e.value)
    with pytest.raises(ShmSpaceError):  # auto does not fall back to /dev/shm for lack of memory
        Segment.create(4 << 20, kind="auto")
    assert len(os.listdir("/proc/self/fd")) == fds


def test_fallocate_failure_is_a_space_error_and_closes_the_fd(monkeypatch):
    def fail(fd, off, n):
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(shm, "memory_headroom", lambda: None)
    monkeypatch.setattr(shm.os, "posix_fallocate", fail)
    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(ShmSpaceError, match="the kernel refused to reserve it"):
        Segment.create(4096, kind="memfd")
    assert len(os.listdir("/proc/self/fd")) == fds


def test_auto_falls_back_to_posix_where_memfd_is_forbidden(monkeypatch):
    def forbidden(*a):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(shm.os, "memfd_create", forbidden)
    seg = Segment.create(4096, kind="auto")
    try:
        assert seg.kind == "posix" and os.path.exists(f"/dev/shm/{seg.name}")
    finally:
        seg.close()
        seg.unlink()
    with pytest.raises(PermissionError):
        Segment.create(4096, kind="memfd")
    with pytest.raises(ValueError, match="kind must be one of"):
        Segment.create(4096, kind="tmpfs")


def test_memory_cgroup_discovery(tmp_path):
    """v1 and v2 hierarchies found through a fake /proc/self, every ancestor counted."""
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    proc.mkdir()
    (proc / "cgroup").write_text("4:memory:/outer/inner\n1:cpu:/outer\n0::/svc/app\n")
    (proc / "mountinfo").write_text(
        f"35 31 0:32 / {cg}/memory rw,relatime - cgroup cgroup rw,memory\n"
        f"41 31 0:38 /svc {cg}/unified rw,relatime - cgroup2 cgroup2 rw\n"
        f"42 31 0:39 / {cg}/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    )
    v1, v2 = cg / "memory" / "outer" / "inner", cg / "unified" / "app"
    v1.mkdir(parents=True)
    v2.mkdir(parents=True)
    dirs = headroom_mod._memory_cgroup_dirs(str(proc))
    assert [d for d, *_ in dirs] == [str(v1), str(v1.parent), str(cg / "memory"), str(v2), str(cg / "unified")]
    (v1 / "memory.limit_in_bytes").write_text("104857600\n")
    (v1 / "memory.usage_in_bytes").write_text("94371840\n")
    (v1.parent / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    (v1.parent / "memory.usage_in_bytes").write_text("94371840\n")
    (v2 / "memory.max").write_text("max\n")
    (v2 / "memory.current").write_text("1000\n")
    (cg / "unified" / "memory.max").write_text("67108864\n")
    (cg / "unified" / "memory.current").write_text("33554432\n")
    orig = headroom_mod._memory_cgroup_dirs
    headroom_mod._memory_cgroup_dirs = lambda: orig(str(proc))
    try:
        left, what = headroom_mod.memory_headroom()
    finally:
        headroom_mod._memory_cgroup_dirs = orig
    assert left == 10 << 20
    assert what == f"memory cgroup {v1} has 10.0 MiB left (memory.limit_in_bytes 100.0 MiB, memory.usage_in_bytes 90.0 MiB)"


@pytest.mark.timeout(120)
@pytest.mark.skipif(not can_mount_small_shm(), reason="needs root and unshare to mount a 64 MB /dev/shm")
def test_160_mib_memfd_segment_under_a_64_mb_dev_shm():
    code = textwrap.dedent(
        """
        import os
        from ringcast.shm import Segment, ShmSpaceError
        print("SHM", os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize)
        seg = Segment.create(160 << 20, kind="auto")
        peer = Segment.attach(seg.locator)
        seg.buf[-1] = 42
        peer.buf[0] = 7
        print("MEMFD", seg.kind, peer.buf[-1], seg.buf[0], len(peer.buf))
        peer.close(); seg.close()
        try:
            Segment.create(160 << 20, kind="posix")
        except ShmSpaceError as e:
            print("POSIX", e)
        print("LEFT", sorted(os.listdir("/dev/shm")))
        """
    )
    r = python_under_small_shm("64m", ["-c", code], timeout=100)
    assert r.returncode == 0, r.stderr
    assert f"SHM {64 << 20}" in r.stdout
    assert f"MEMFD memfd 42 7 {160 << 20}" in r.stdout
    assert "POSIX [Errno 28] cannot create a 160.0 MiB shared-memory segment: /dev/shm has 64.0 MiB free" in r.stdout
    assert "LEFT []" in r.stdout


_QUEUE_UNDER_SMALL_SHM = """
import hashlib, os, sys
sys.path.insert(0, {tests!r})
from ringcast import MessageQueue
import _workers
from _procs import Children

def main():
    w = MessageQueue(3, 3, max_chunk_bytes=16 << 20, max_chunks=10)
    msgs = [(i, os.urandom(15 << 20) if i % 5 == 0 else bytes([i]) * 1000) for i in range(20)]
    expect = hashlib.blake2b(b"".join(p for _, p in msgs)).hexdigest()
    try:
        with Children(timeout=90) as ch:
            for r in range(3):
                ch.start(r, _workers.reader_digest, w.export_handle(), r, len(msgs))
            w.wait_until_ready(timeout=60)
            for m in msgs:
                w.enqueue(m, timeout=60)
            res = ch.wait()
        print("KIND", w.buffer.segment.kind)
        print("OK", all(ok and digest == expect for ok, digest, _ in res.values()))
    finally:
        w.close()
    print("LEFT", sorted(n for n in os.listdir("/dev/shm") if n.startswith("ringcast")))

if __name__ == "__main__":
    main()
"""


@pytest.mark.timeout(180)
@pytest.mark.skipif(not can_mount_small_shm(), reason="needs root and unshare to mount a 64 MB /dev/shm")
def test_queue_of_160_mib_with_3_readers_under_a_64_mb_dev_shm(tmp_path):
    script = tmp_path / "queue_under_small_shm.py"
    script.write_text(_QUEUE_UNDER_SMALL_SHM.format(tests=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    r = python_under_small_shm("64m", [str(script)], timeout=170)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "KIND memfd" in r.stdout and "OK True" in r.stdout and "LEFT []" in r.stdout

