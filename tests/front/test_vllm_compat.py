"""ringcast's MessageQueue as a drop-in for vLLM 0.33's (docs/engine.md, "vLLM 0.33 compatibility").

* the public surface: every public method, keyword, default and instance attribute of vLLM's
  class, read from vLLM 0.33's own source through ../shared/peers/vllm_peer.py (skipped, with
  the reason, where that peer is not set up);
* what vLLM code does with it: ``dequeue(indefinite=True)``, ``enable_shm_tensor_arena=True``,
  ``except RuntimeError`` around a shut-down queue, ``shutting_down``, the group constructors'
  ``external_writer_handle=`` / ``blocking=`` and ``create_from_process_group_single_reader``;
* a queue nobody closes, in a reference cycle: ``gc.collect()`` returns (vLLM has no ``close()``,
  so drop-in users never call one), in the writer's process and in a reader's, with messages
  pending and without;
* group options reach the side that takes them (writer-only ones only the writer), so a tensor
  arena can be made through a group.
"""

from __future__ import annotations

import ast
import inspect
import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from ringcast import Cancelled, MessageQueue, RingcastError
from ringcast.groups import split_options
from ringcast.queue import DEFAULT_ARENA_BYTES
from ringcast.roles import Role

from _procs import CTX, Children
from _thread_group import run_group

ROOT = Path(__file__).resolve().parents[2]
#: ../shared/peers of the main checkout; a worktree under <project>/wt/<name> finds it two levels up.
PEER_DIR = Path(os.environ.get("RINGCAST_VLLM_PEER_DIR") or next(
    (p for p in (ROOT.parent / "shared" / "peers", ROOT.parent.parent / "shared" / "peers") if (p / "vllm_peer.py").is_file()),
    ROOT.parent / "shared" / "peers"))
MIB = 1 << 20

#: vLLM public names ringcast does not provide, each with the reason (docs/engine.md repeats it).
NOT_PROVIDED = {
    "ReadTimeoutWithWarnings": "vLLM's internal helper of acquire_read (a deadline plus warning times); "
    "ringcast's waits and their long-wait log live in ringcast.waiting / ringcast.observers",
}


# -- the public surface, name by name -----------------------------------------------------------------
def describe(cls) -> dict:
    """Every public name of ``cls`` (and ``__init__``): its kind and, for callables, each
    parameter as ``[name, kind, has_default, repr(default)]``."""
    out = {}
    names = {n for k in reversed(cls.__mro__[:-1]) for n in vars(k) if not n.startswith("_")} | {"__init__"}
    for name in sorted(names):
        raw = inspect.getattr_static(cls, name)
        if isinstance(raw, staticmethod):
            kind = "staticmethod"
        elif isinstance(raw, classmethod):
            kind = "classmethod"
        elif isinstance(raw, property):
            kind = "property"
        elif inspect.isclass(raw):
            kind = "class"
        elif inspect.isfunction(raw):
            kind = "function"
        else:
            kind = "attribute"
        params = None
        if kind in ("staticmethod", "classmethod", "function"):
            params = [[p.name, p.kind.name, p.default is not p.empty, repr(p.default) if p.default is not p.empty else None]
                      for p in inspect.signature(getattr(cls, name)).parameters.values()]
        out[name] = {"kind": kind, "params": params}
    return out


def instance_attributes(source: str, class_name: str = "MessageQueue") -> list[str]:
    """The public ``self.X`` attributes the class's own methods assign (read from its source;
    not those of a nested class)."""
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == class_name)
    out = set()
    methods = [f for f in cls.body if isinstance(f, ast.FunctionDef)]
    for n in (n for f in methods for n in ast.walk(f)):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" and not t.attr.startswith("_"):
                out.add(t.attr)
    return sorted(out)


def incompatibilities(theirs: dict, ours: dict) -> list[str]:
    """What a call valid against ``theirs`` (a :func:`describe`) would do differently against
    ``ours``: a missing name, another kind, a positional parameter at another place, a keyword
    we do not take, another default, or a parameter of ours that such a call would not fill."""
    out = []
    for name, t in theirs.items():
        o = ours.get(name)
        if o is None:
            out.append(f"{name}: missing")
            continue
        if o["kind"] != t["kind"]:
            out.append(f"{name}: a {o['kind']} here, a {t['kind']} in vLLM")
            continue
        if t["params"] is None:
            continue
        mine = {p[0]: p for p in o["params"]}
        takes_any = any(p[1] == "VAR_KEYWORD" for p in o["params"])
        for i, (pname, pkind, has_default, default) in enumerate(t["params"]):
            if pkind in ("VAR_POSITIONAL", "VAR_KEYWORD"):
                continue
            p = mine.get(pname)
            if p is None:
                if not takes_any:
                    out.append(f"{name}({pname}=): not accepted")
                continue
            if pkind == "POSITIONAL_OR_KEYWORD" and (i >= len(o["params"]) or o["params"][i][0] != pname):
                out.append(f"{name}: positional parameter {i} is {pname} in vLLM, {o['params'][i][0] if i < len(o['params']) else 'absent'} here")
            if has_default and (not p[2] or p[3] != default):
                out.append(f"{name}({pname}=): default {default} in vLLM, {p[3] if p[2] else 'none'} here")
        theirs_names = {p[0] for p in t["params"]}
        for pname, pkind, has_default, _ in o["params"]:
            if pname not in theirs_names and not has_default and pkind not in ("VAR_POSITIONAL", "VAR_KEYWORD"):
                out.append(f"{name}({pname}): required here, unknown to vLLM")
    return out


#: What a child interpreter runs first: vLLM's module as ``mod`` (or a line saying why not).
_PEER_PRELUDE = """
import json, sys
sys.path[:0] = sys.argv[1:]  # the peer, this file's folder, and tests/ (its helpers)
import vllm_peer, test_vllm_compat as t
try:
    mod = vllm_peer.load_vllm_shm_broadcast()
except vllm_peer.PeerUnavailable as e:
    print(json.dumps({"unavailable": str(e)}))
    raise SystemExit(0)
"""
_PEER_SCRIPT = _PEER_PRELUDE + """
src = open(mod.__file__).read()
import dataclasses
print(json.dumps({"surface": t.describe(mod.MessageQueue), "attrs": t.instance_attributes(src),
                  "handle_fields": [f.name for f in dataclasses.fields(mod.Handle)]}))
"""


@pytest.fixture(scope="module")
def vllm_surface() -> dict:
    """vLLM 0.33's MessageQueue, described in a child interpreter (the peer puts stand-in ``vllm``
    modules into sys.modules, which must not leak into this one). Never downloads: skips unless
    ``python ../shared/peers/vllm_peer.py setup`` has extracted the sources."""
    if not (PEER_DIR / "vllm_peer.py").is_file():
        pytest.skip(f"the vLLM peer is not set up: no {PEER_DIR / 'vllm_peer.py'} (set RINGCAST_VLLM_PEER_DIR)")
    sys.path.insert(0, str(PEER_DIR))
    try:
        import vllm_peer
    finally:
        sys.path.remove(str(PEER_DIR))
    manifest = vllm_peer.DEFAULT_CACHE_DIR / f"src-vllm-{vllm_peer.VLLM_VERSION}" / "MANIFEST.json"
    if not manifest.is_file():
        pytest.skip(f"vLLM {vllm_peer.VLLM_VERSION}'s sources are not extracted ({manifest} missing): run "
                    f"`python3 {PEER_DIR / 'vllm_peer.py'} setup` once (it downloads the wheel)")
    r = subprocess.run([sys.executable, "-c", _PEER_SCRIPT, str(PEER_DIR), str(Path(__file__).parent), str(Path(__file__).parents[1])],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if "unavailable" in got:
        pytest.skip(f"the vLLM peer cannot load here: {got['unavailable']}")
    return got


def test_every_public_name_of_vllms_class_is_accepted(vllm_surface):
    theirs = {n: d for n, d in vllm_surface["surface"].items() if n not in NOT_PROVIDED}
    assert set(NOT_PROVIDED) <= set(vllm_surface["surface"]), "an exception for a name vLLM does not have"
    problems = incompatibilities(theirs, describe(MessageQueue))
    assert not problems, "vLLM 0.33 calls ringcast does not take alike:\n" + "\n".join(problems)


def test_every_public_attribute_of_vllms_queues_is_readable(vllm_surface):
    w = MessageQueue(1, 1, max_chunk_bytes=4096, max_chunks=2)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        for q in (w, r):
            missing = [a for a in vllm_surface["attrs"] if not hasattr(q, a)]
            assert not missing, f"{q!r} lacks vLLM's attributes {missing}"
    finally:
        r.close()
        w.close()


def test_the_comparison_sees_each_kind_of_difference():
    def f(self, a, b=1, *, c=None):
        pass

    theirs = {"f": {"kind": "function", "params": [["self", "POSITIONAL_OR_KEYWORD", False, None], ["a", "POSITIONAL_OR_KEYWORD", False, None],
                                                   ["b", "POSITIONAL_OR_KEYWORD", True, "1"], ["c", "KEYWORD_ONLY", True, "None"]]}}
    ours = {"f": dict(theirs["f"])}
    assert incompatibilities(theirs, ours) == []
    assert incompatibilities(theirs, {}) == ["f: missing"]
    assert incompatibilities(theirs, {"f": {"kind": "staticmethod", "params": theirs["f"]["params"]}}) == ["f: a staticmethod here, a function in vLLM"]
    swapped = [theirs["f"]["params"][i] for i in (0, 2, 1, 3)]
    assert any("positional parameter 1" in p for p in incompatibilities(theirs, {"f": {"kind": "function", "params": swapped}}))
    other_default = [*theirs["f"]["params"][:2], ["b", "POSITIONAL_OR_KEYWORD", True, "2"], theirs["f"]["params"][3]]
    assert incompatibilities(theirs, {"f": {"kind": "function", "params": other_default}}) == ["f(b=): default 1 in vLLM, 2 here"]
    assert incompatibilities(theirs, {"f": {"kind": "function", "params": theirs["f"]["params"][:3]}}) == ["f(c=): not accepted"]
    extra = [*theirs["f"]["params"], ["d", "KEYWORD_ONLY", False, None]]
    assert incompatibilities(theirs, {"f": {"kind": "function", "params": extra}}) == ["f(d): required here, unknown to vLLM"]
    assert describe(type("K", (), {"f": f}))["f"]["params"] == theirs["f"]["params"]


def test_names_ringcast_does_not_provide_are_documented():
    chapter = (ROOT / "docs" / "engine.md").read_text().split("## vLLM 0.33 compatibility", 1)
    assert len(chapter) == 2, "docs/engine.md has no 'vLLM 0.33 compatibility' chapter"
    for name in NOT_PROVIDED:
        assert f"`{name}`" in chapter[1], f"{name} is not provided but docs/engine.md does not say why"


def test_defaults_are_vllms():
    sig = inspect.signature(MessageQueue)
    assert sig.parameters["max_chunk_bytes"].default == 24 * MIB
    assert list(sig.parameters)[:7] == ["n_reader", "n_local_reader", "local_reader_ranks", "max_chunk_bytes", "max_chunks",
                                        "connect_ip", "enable_shm_tensor_arena"]
    cfpg = inspect.signature(MessageQueue.create_from_process_group).parameters
    assert list(cfpg)[:6] == ["pg", "max_chunk_bytes", "max_chunks", "writer_rank", "external_writer_handle", "blocking"]
    assert cfpg["blocking"].default is True and cfpg["external_writer_handle"].default is None
    single = inspect.signature(MessageQueue.create_from_process_group_single_reader).parameters
    assert list(single)[:5] == ["pg", "max_chunk_bytes", "max_chunks", "reader_rank", "blocking"] and single["blocking"].default is False


# -- behaviour vLLM code relies on ----------------------------------------------------------------------
def _ready(w, r) -> None:
    t = threading.Thread(target=r.wait_until_ready, args=(10,))
    t.start()
    w.wait_until_ready(10)
    t.join()


def _pair(**kw):
    w = MessageQueue(1, 1, None, 4096, 4, **kw)
    r = MessageQueue.create_from_handle(w.export_handle(), 0, **{k: v for k, v in kw.items() if k in ("spin", "recheck_interval", "warn_interval")})
    _ready(w, r)
    return w, r


def _long_wait_logs(caplog):
    return [rec for rec in caplog.records if "still waiting" in rec.getMessage()]


@pytest.mark.parametrize("how", ["dequeue", "acquire_read"])
def test_indefinite_waits_are_not_logged_as_long(caplog, how):
    """vLLM's worker loop calls ``dequeue(indefinite=True)``: an idle worker may wait for hours,
    and the long-wait log is for waits that are not expected. warn_interval is tiny here, so
    every timed wake of a logged wait would log."""
    w, r = _pair(spin=0, recheck_interval=0.005, warn_interval=1e-9)
    caplog.set_level(logging.INFO, logger="ringcast")
    try:
        def wait(**kw):
            if how == "dequeue":
                r.dequeue(0.1, **kw)
            else:
                with r.acquire_read(0.1, **kw):
                    pass

        with pytest.raises(TimeoutError):
            wait(indefinite=True)
        assert _long_wait_logs(caplog) == []
        with pytest.raises(TimeoutError):
            wait()  # the same wait, not marked: logged
        assert _long_wait_logs(caplog)
        w.enqueue("after")
        assert r.dequeue(5, True) == "after"  # positional, as vLLM's signature allows
    finally:
        r.close()
        w.close()


def test_enable_shm_tensor_arena_makes_the_default_arena():
    torch = pytest.importorskip("torch")
    w = MessageQueue(1, 1, None, 64 * 1024, 4, None, True)  # vLLM's positional spelling
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        _ready(w, r)
        assert w.tensor_arena is not None and r.tensor_arena is not None
        assert w.tensor_arena.arena.n_slots * w.tensor_arena.arena.slot_bytes <= DEFAULT_ARENA_BYTES
        a = torch.arange(8 * MIB // 8, dtype=torch.int64)  # vLLM's arena: CPU tensors from 8 MiB
        w.enqueue(a)
        b = r.dequeue(5)
        assert torch.equal(a, b) and r.statistics().arena_hits == 1 and w.statistics().arena_hits == 1
        del b
    finally:
        r.close()
        w.close()
    plain = MessageQueue(1, 1, None, 4096, 2)
    try:
        assert plain.tensor_arena is None
    finally:
        plain.close()


def test_shutdown_raises_what_vllm_callers_catch():
    w, r = _pair(spin=0)
    try:
        assert (w.shutting_down, r.shutting_down) == (False, False)
        r.shutdown()
        assert r.shutting_down
        with pytest.raises(RuntimeError, match="shutdown"):  # vLLM: RuntimeError("cancelled")
            r.dequeue(5)
        assert issubclass(Cancelled, RuntimeError) and issubclass(Cancelled, RingcastError)
    finally:
        r.close()
        w.close()
    assert w.shutting_down  # close() cancels too


def test_role_is_public_and_read_only():
    w, r = _pair()
    try:
        assert (w.role, w.is_writer, w.is_local_reader, w.writer_rank) == (Role.WRITER, True, False, None)
        assert (r.role, r.is_writer, r.is_local_reader) == (Role.LOCAL_READER, False, True)
        assert w.statistics().role == "writer" and r.statistics().role == "local_reader"
        with pytest.raises(AttributeError):
            w.is_writer = False
    finally:
        r.close()
        w.close()


def test_static_recv_reads_a_remote_message():
    w = MessageQueue(1, 0, None, 4096, 2, "127.0.0.1")
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        _ready(w, r)
        w.enqueue({"x": [1, 2]})
        assert MessageQueue.recv(r.remote_socket, 5) == {"x": [1, 2]}
        with pytest.raises(TimeoutError):
            MessageQueue.recv(r.remote_socket, 0.01)
    finally:
        r.close()
        w.close()


# -- the group constructors ---------------------------------------------------------------------------
@pytest.mark.timeout(90)
def test_group_options_go_to_the_side_that_takes_them():
    wkw, rkw = split_options(MessageQueue, {"spin": 0, "warn_interval": 5.0, "segment_kind": "posix", "tensor_arena_bytes": 1,
                                            "tensor_arena_slots": 2, "allowed_classes": ["x.Y"], "evict_dead_readers": True})
    assert set(wkw) == {"spin", "warn_interval", "segment_kind", "tensor_arena_bytes", "tensor_arena_slots", "evict_dead_readers"}
    assert set(rkw) == {"spin", "warn_interval", "allowed_classes"}
    with pytest.raises(TypeError, match="bogus"):
        split_options(MessageQueue, {"bogus": 1})


@pytest.mark.timeout(90)
def test_a_tensor_arena_through_a_process_group():
    """Writer-only options (arena, segment kind) used to reach the readers' create_from_handle,
    which does not take them: no arena could be made through a group."""
    a = np.arange(2 * MIB // 8, dtype=np.int64)

    def member(g):
        mq = MessageQueue.create_from_process_group(g, 64 * 1024, 4, 0, tensor_arena_bytes=8 * MIB, tensor_arena_slots=2,
                                                    segment_kind="posix", spin=0, timeout=20)
        try:
            got = mq.broadcast_object(a if mq.is_writer else None)
            s = mq.statistics()
            del got
            g.all_gather_obj(None)  # every member has read before anyone closes
            return mq.writer_rank, s.arena_hits, np.array_equal(a, a)
        finally:
            mq.close()

    res = run_group(3, member)
    assert [x[:2] for x in res] == [(0, 1)] * 3


@pytest.mark.timeout(90)
def test_external_writer_handle_and_non_blocking_group():
    """vLLM's create_mq_broadcaster: a queue written outside the group; its group rank
    ``writer_rank`` joins it with the external handle and every member reads it. ``blocking=False``
    leaves the handshake to the caller."""
    ext = MessageQueue(3, 3, [0, 1, 2], 4096, 4)

    def member(g):
        mq = MessageQueue.create_from_process_group(g, 4096, 4, 1, ext.export_handle() if g.rank == 1 else None, False)
        try:
            g.all_gather_obj(None)  # every member has joined (subscribed)
            if g.rank == 0:  # the outside writer, driven from one thread
                ext.wait_until_ready(20)
                ext.enqueue("from outside", timeout=20)
            mq.wait_until_ready(20)
            got = mq.dequeue(10)
            g.all_gather_obj(None)
            return mq.role, mq.writer_rank, got
        finally:
            mq.close()

    try:
        assert run_group(3, member) == [(Role.LOCAL_READER, 1, "from outside")] * 3
    finally:
        ext.close()


@pytest.mark.timeout(90)
def test_create_from_process_group_single_reader():
    def member(g):
        mq, handles = MessageQueue.create_from_process_group_single_reader(g, 4096, 4, 2)
        readers = []
        try:
            assert mq.is_writer and (len(handles) == 3) == (g.rank == 2) and mq.writer_rank is None
            if g.rank == 2:
                readers = [MessageQueue.create_from_handle(h, 0) for h in handles]
                ts = [threading.Thread(target=q.wait_until_ready, args=(20,)) for q in readers]
                for t in ts:
                    t.start()
            g.all_gather_obj(None)
            mq.wait_until_ready(20)
            mq.enqueue(("from", g.rank))
            if g.rank == 2:
                for t in ts:
                    t.join()
                return [q.dequeue(10) for q in readers]
            return None
        finally:
            g.all_gather_obj(None)
            for q in readers:
                q.close()
            mq.close()

    out = run_group(3, member)
    assert out[2] == [("from", 0), ("from", 1), ("from", 2)] and out[:2] == [None, None]


# -- collection never blocks ----------------------------------------------------------------------------
def _collect_in_cycle(queues: list) -> dict:
    """Put ``queues`` (unclosed) into a reference cycle, drop this list's references, collect
    (the caller holds no other reference). ``freed``: the queues are gone."""
    import gc
    import time
    import weakref

    refs = [weakref.ref(q) for q in queues]
    cycle: list = [*queues]
    cycle.append(cycle)
    for q in queues:
        q.cycle = cycle  # e.g. an exception stored beside the queue, holding its frame
    queues.clear()
    del cycle, q
    t0 = time.monotonic()
    gc.collect()
    return {"freed": all(r() is None for r in refs), "seconds": time.monotonic() - t0}


def _guard() -> None:
    import faulthandler
    import gc

    gc.disable()  # the collection happens where the test calls it
    faulthandler.dump_traceback_later(30, exit=True)  # a hang ends the child with a traceback


def child_writer_collected(handle_q, pending: bool, kind: str) -> dict:
    """A writer (one local, one remote reader in the parent) dropped unclosed in a cycle."""
    _guard()
    w = MessageQueue(2, 1, None, 4096, 4, "127.0.0.1", segment_kind=kind)
    handle_q.put(w.export_handle())
    w.wait_until_ready(20)
    if pending:  # nobody reads: three chunks and one overflow payload on each socket
        for i in range(3):
            w.enqueue(i, timeout=5)
        w.enqueue(b"x" * 100_000, timeout=5)
    qs = [w]
    del w
    return _collect_in_cycle(qs)


def child_reader_collected(handle, rank: int, sent) -> dict:
    """A reader dropped unclosed in a cycle, after the writer sent it messages it never read."""
    _guard()
    r = MessageQueue.create_from_handle(handle, rank)
    r.wait_until_ready(20)
    if not sent.wait(20):
        raise TimeoutError("the writer did not send")
    qs = [r]
    del r
    return _collect_in_cycle(qs)


def child_both_collected(pending: bool, kind: str) -> dict:
    """The issue's case: writer and reader of one process, in one cycle."""
    _guard()
    w = MessageQueue(1, 1, None, 4096, 4, segment_kind=kind)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    t = threading.Thread(target=r.wait_until_ready, args=(20,))
    t.start()
    w.wait_until_ready(20)
    t.join()
    if pending:
        w.enqueue(1, timeout=5)
        w.enqueue(b"x" * 100_000, timeout=5)
    qs = [w, r]
    del w, r, t
    return _collect_in_cycle(qs)


def child_writer_before_handshake_collected(kind: str) -> dict:
    """A writer collected before any reader joined: its segment name must go with it."""
    _guard()
    w = MessageQueue(1, 1, None, 4096, 2, segment_kind=kind)
    name = w.buffer.segment.name
    qs = [w]
    del w
    out = _collect_in_cycle(qs)
    out["name_left"] = os.path.exists(f"/dev/shm/{name}")
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pending", [False, True])
@pytest.mark.parametrize("kind", ["auto", "posix"])
def test_gc_of_an_unclosed_writer_in_a_cycle_returns(pending, kind):
    with Children(timeout=60) as ch:
        handle_q = CTX.Queue()
        ch.start("w", child_writer_collected, handle_q, pending, kind)
        h = handle_q.get(timeout=30)
        readers = [MessageQueue.create_from_handle(h, 0), MessageQueue.create_from_handle(h, 1)]
        try:
            for q in readers:
                q.wait_until_ready(20)
            got = ch.wait()["w"]
        finally:
            for q in readers:
                q.close()
    assert got["freed"], got


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pending", [False, True])
def test_gc_of_an_unclosed_reader_in_a_cycle_returns(pending):
    w = MessageQueue(2, 1, None, 4096, 4, "127.0.0.1")
    sent = CTX.Event()
    try:
        with Children(timeout=60) as ch:
            ch.start("local", child_reader_collected, w.export_handle(), 0, sent)
            ch.start("remote", child_reader_collected, w.export_handle(), 1, sent)
            w.wait_until_ready(20)
            if pending:
                for i in range(3):
                    w.enqueue(i, timeout=5)
                w.enqueue(b"x" * 100_000, timeout=5)
            sent.set()
            got = ch.wait()
    finally:
        w.close()
    assert got["local"]["freed"] and got["remote"]["freed"], got


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pending", [False, True])
def test_gc_of_writer_and_reader_in_one_cycle_returns(pending):
    with Children(timeout=60) as ch:
        ch.start("both", child_both_collected, pending, "auto")
        got = ch.wait()["both"]
    assert got["freed"], got


@pytest.mark.timeout(120)
def test_gc_of_a_writer_before_its_handshake_removes_its_segment_name():
    with Children(timeout=60) as ch:
        ch.start("w", child_writer_before_handshake_collected, "posix")
        got = ch.wait()["w"]
    assert got["freed"] and not got["name_left"], got


# -- vLLM 0.33's call sites, side by side with vLLM's own class --------------------------------------------
# Each scenario takes a MessageQueue class and returns plain data. It runs here on ringcast's class,
# and in a child interpreter on vLLM 0.33's real class (../shared/peers/vllm_peer.py; the child needs
# no vLLM platform module for these): both must give EXPECTED, which is what vLLM 0.33 gives.
def _ready_all(w, readers) -> None:
    """The READY handshake with vLLM's signature (no timeout): readers in threads."""
    ts = [threading.Thread(target=r.wait_until_ready, daemon=True) for r in readers]
    for t in ts:
        t.start()
    w.wait_until_ready()
    for t in ts:
        t.join(30)
    assert not any(t.is_alive() for t in ts), "a reader's READY never came"


def _close_all(*qs) -> None:
    for q in qs:
        if hasattr(q, "close"):  # vLLM's class has none: its finalizer closes the sockets
            q.close()


def scenario_executor_peer_response(MQ) -> dict:
    """MultiprocExecutor.wait_for_response_handle_ready: a worker on another node made its
    response queue ``MessageQueue(1, 0, ...)`` (no local reader); the executor joins every peer's
    response queue that has a remote address with ``create_from_handle(handle, -1)``."""
    w = MQ(1, 0, None, 1 << 16, 6, "127.0.0.1")
    h = w.export_handle()
    r = MQ.create_from_handle(h, -1) if h.remote_subscribe_addr is not None else None
    try:
        _ready_all(w, [r])
        w.enqueue({"output": [1, 2]})
        return {"got": r.dequeue(timeout=10), "local_reader_rank": r.local_reader_rank, "current_idx": r.current_idx}
    finally:
        _close_all(r, w)


def scenario_timeouts(MQ) -> list:
    """Timeouts as vLLM takes them: a negative one has expired (a ready message is still
    returned, else TimeoutError at once), numpy scalars are seconds like floats."""
    import numpy

    w = MQ(1, 1, None, 1 << 16, 6)
    r = MQ.create_from_handle(w.export_handle(), 0)
    out = []
    try:
        _ready_all(w, [r])
        w.enqueue("a", timeout=numpy.int64(5))
        out.append(r.dequeue(timeout=-1))
        w.enqueue("b", timeout=numpy.float32(5.0))
        out.append(r.dequeue(timeout=numpy.float32(-0.5)))
        w.enqueue("c", timeout=-3)  # a free chunk: an expired timeout still writes
        out.append(r.dequeue(timeout=numpy.int64(5)))
        for t in (-1, numpy.float32(0.01), numpy.int64(0)):
            try:
                out.append(["no timeout", r.dequeue(timeout=t)])
            except TimeoutError:
                out.append("TimeoutError")
        return out
    finally:
        _close_all(r, w)


def scenario_shutdown_text(MQ) -> dict:
    """vLLM's tests match "cancelled" in the error of a reader woken by shutdown()."""
    w = MQ(1, 1, None, 1 << 16, 6)
    r = MQ.create_from_handle(w.export_handle(), 0)
    try:
        _ready_all(w, [r])
        r.shutdown()
        try:
            r.dequeue(timeout=5)
        except RuntimeError as e:
            return {"error": type(e).__mro__[1].__name__ if type(e).__name__ != "RuntimeError" else "RuntimeError",
                    "says_cancelled": "cancelled" in str(e), "is_runtime_error": True}
        return {"error": None}
    finally:
        _close_all(r, w)


def scenario_handle_fields(MQ) -> dict:
    """vLLM's Handle field names, read off a handle with local readers and one without."""
    local = MQ(1, 1, None, 4096, 2)
    remote = MQ(1, 0, None, 4096, 2, "127.0.0.1")
    try:
        hl, hr = local.export_handle(), remote.export_handle()
        return {"arena": [hl.tensor_arena_handle, hr.tensor_arena_handle],
                "notify_is_str": [isinstance(hl.local_notify_addr, str), hr.local_notify_addr is None],
                "remote": [hl.remote_subscribe_addr is None, hr.remote_subscribe_addr is not None]}
    finally:
        _close_all(local, remote)


SCENARIOS = {
    "executor_peer_response": (scenario_executor_peer_response,
                               {"got": {"output": [1, 2]}, "local_reader_rank": -1, "current_idx": -1}),
    "timeouts": (scenario_timeouts, ["a", "b", "c", "TimeoutError", "TimeoutError", "TimeoutError"]),
    "shutdown_text": (scenario_shutdown_text, {"says_cancelled": True, "is_runtime_error": True}),
    "handle_fields": (scenario_handle_fields, {"arena": [None, None], "notify_is_str": [True, True], "remote": [True, True]}),
}

_SCENARIO_SCRIPT = _PEER_PRELUDE + """
out = {}
for name, (fn, _expected) in t.SCENARIOS.items():
    try:
        out[name] = t._comparable(name, fn(mod.MessageQueue))
    except Exception as e:
        out[name] = f"raised {type(e).__name__}: {e}"
out["long_wait_log"] = mod.LONG_WAIT_TIME_LOG_MSG
out["warning_interval"] = mod.VLLM_RINGBUFFER_WARNING_INTERVAL
print(json.dumps(out))
"""


def _comparable(name: str, got):
    """A scenario's result, reduced to what EXPECTED states (the shutdown error's class differs
    by design: ringcast's Cancelled is a RuntimeError)."""
    if name == "shutdown_text" and isinstance(got, dict):
        got = {k: v for k, v in got.items() if k in ("says_cancelled", "is_runtime_error")}
    return json.loads(json.dumps(got))


@pytest.fixture(scope="module")
def vllm_behaviour(vllm_surface) -> dict:
    """Every scenario run on vLLM 0.33's class, in one child (with $VLLM_RINGBUFFER_WARNING_INTERVAL
    set to 7, to see vLLM read it)."""
    env = dict(os.environ, VLLM_RINGBUFFER_WARNING_INTERVAL="7")
    r = subprocess.run([sys.executable, "-c", _SCENARIO_SCRIPT, str(PEER_DIR), str(Path(__file__).parent), str(Path(__file__).parents[1])],
                       capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if "unavailable" in got:
        pytest.skip(f"the vLLM peer cannot load here: {got['unavailable']}")
    return got


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_vllm_call_sites_behave_as_on_vllm(name):
    fn, expected = SCENARIOS[name]
    assert _comparable(name, fn(MessageQueue)) == expected


@pytest.mark.timeout(300)
def test_the_expectations_are_vllms_own(vllm_behaviour):
    """EXPECTED is what vLLM 0.33's real class gives (so the test above compares with vLLM, not
    with what ringcast happened to do)."""
    wrong = {n: vllm_behaviour[n] for n, (_fn, exp) in SCENARIOS.items() if vllm_behaviour[n] != exp}
    assert not wrong, f"vLLM 0.33 gives other results than EXPECTED: {wrong}"
    assert vllm_behaviour["warning_interval"] == 7


def test_long_wait_log_is_vllms_line_at_vllms_level(caplog, vllm_behaviour):
    """The long-wait line starts with vLLM's own LONG_WAIT_TIME_LOG_MSG (read from vLLM's
    source), formatted with the interval, logged at INFO as vLLM logs it."""
    from ringcast.observers import QueueObserver
    from ringcast.waiting import WaitPolicy

    observer = QueueObserver("writer", WaitPolicy(warn_interval=7.0), None, [False])
    caplog.set_level(logging.DEBUG, logger="ringcast")
    observer.log_long_wait(7.5, "slot 0")
    observer.log_long_wait(8.0, "slot 0")  # not yet 7 s after the last line
    [rec] = [r for r in caplog.records if r.name == "ringcast"]
    assert rec.levelno == logging.INFO
    assert rec.getMessage().startswith(vllm_behaviour["long_wait_log"] % 7 + " [ringcast writer")


def test_vllm_warning_interval_variable_is_warn_intervals_default(monkeypatch):
    monkeypatch.setenv("VLLM_RINGBUFFER_WARNING_INTERVAL", "7")
    w = MessageQueue(1, 1, None, 4096, 2)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    explicit = MessageQueue(1, 1, None, 4096, 2, warn_interval=3.0)
    try:
        assert (w.policy.warn_interval, r.policy.warn_interval, explicit.policy.warn_interval) == (7.0, 7.0, 3.0)
        monkeypatch.setenv("VLLM_RINGBUFFER_WARNING_INTERVAL", "soon")
        with pytest.raises(ValueError, match="VLLM_RINGBUFFER_WARNING_INTERVAL='soon'"):
            MessageQueue(1, 1, None, 4096, 2)
        monkeypatch.delenv("VLLM_RINGBUFFER_WARNING_INTERVAL")
        with MessageQueue(1, 1, None, 4096, 2) as plain:
            assert plain.policy.warn_interval == 60.0  # vLLM's default too
    finally:
        _close_all(explicit, r, w)


def test_timeouts_refuse_what_is_not_a_number():
    w, r = _pair()
    try:
        for bad, exc in (("1", TypeError), (True, TypeError), (float("nan"), ValueError)):
            with pytest.raises(exc, match="timeout"):
                r.dequeue(timeout=bad)
        w.enqueue("x", timeout=float("inf"))  # inf: no limit, as None
        assert r.dequeue(timeout=float("inf")) == "x"
    finally:
        _close_all(r, w)


def test_an_unattachable_arena_is_tolerated_as_vllm_tolerates_it(caplog):
    """vLLM's test_create_from_handle_tolerates_arena_attach_failure: a reader whose handle names
    an arena it cannot attach still joins (logged) and receives every message that does not use
    the arena."""
    import dataclasses

    w = MessageQueue(1, 1, None, 1 << 16, 4, tensor_arena_bytes=4 * MIB, tensor_arena_slots=2)
    bogus = ("memfd/1/2/3/4/" + "0" * 32, 1, 2, 2 * MIB)  # pid 1 did not create it
    h = dataclasses.replace(w.export_handle(), tensor_arena=bogus)
    assert h.tensor_arena_handle == bogus
    caplog.set_level(logging.WARNING, logger="ringcast")
    r = MessageQueue.create_from_handle(h, 0)
    try:
        assert r.tensor_arena is None
        assert any("joins without the tensor arena" in rec.getMessage() for rec in caplog.records)
        _ready(w, r)
        w.enqueue({"small": np.arange(10)})
        assert r.dequeue(5)["small"].tolist() == list(range(10))
    finally:
        _close_all(r, w)


def test_handle_aliases_write_through():
    w = MessageQueue(1, 1, None, 4096, 2)
    try:
        h = w.export_handle()
        assert h.local_notify_addr == h.local_subscribe_addr
        h.tensor_arena_handle = ("x", 1, 1, 4096)
        assert h.tensor_arena == ("x", 1, 1, 4096)
        h.tensor_arena_handle = None
    finally:
        w.close()


class _Coordinator:
    """A group whose members are global ranks ``ranks`` (vLLM's ``GroupCoordinator.ranks``) over
    a group of threads."""

    def __init__(self, g, ranks) -> None:
        self.g, self.ranks, self.rank, self.world_size = g, ranks, g.rank, g.world_size

    def broadcast_obj(self, obj, src):
        return self.g.broadcast_obj(obj, src)

    def all_gather_obj(self, obj):
        return self.g.all_gather_obj(obj)


@pytest.mark.timeout(90)
def test_single_reader_takes_the_global_rank_as_vllms_group_coordinator_passes_it():
    """GroupCoordinator.create_single_reader_mq_broadcasters(reader_rank_in_group=0) passes
    ``reader_rank=self.ranks[0]``: on a subgroup of global ranks [1, 2] that is 1, group rank 0."""

    def member(g):
        c = _Coordinator(g, [1, 2])
        mq, handles = MessageQueue.create_from_process_group_single_reader(c, 4096, 4, reader_rank=c.ranks[0])
        try:
            return len(handles)
        finally:
            g.all_gather_obj(None)
            mq.close()

    assert run_group(2, member) == [2, 0]  # group rank 0 (global 1) gets every member's handle

    def wrong(g):
        c = _Coordinator(g, [1, 2])
        with pytest.raises(ValueError) as e:
            MessageQueue.create_from_process_group_single_reader(c, 4096, 4, reader_rank=0)
        return str(e.value)

    msg = run_group(2, wrong)[0]
    assert "reader_rank=0 is read as a global rank" in msg and "global ranks [1, 2]" in msg and "pass 1" in msg


def _two_readers(**kw):
    w = MessageQueue(2, 2, None, 32 * MIB, 4, **kw)
    rs = [MessageQueue.create_from_handle(w.export_handle(), i) for i in (0, 1)]
    _ready_all(w, rs)
    return w, rs


@pytest.mark.timeout(120)
def test_vllms_arena_gives_private_copies_below_8_mib():
    """vLLM 0.33 puts only CPU tensors of >= 8 MiB into its arena; below that every reader gets
    a private, writable copy. ``enable_shm_tensor_arena=True`` must do the same: one reader's
    in-place write must not show at the other, and a numpy array must arrive writable."""
    torch = pytest.importorskip("torch")
    w, rs = _two_readers(enable_shm_tensor_arena=True)
    try:
        t = torch.arange(MIB // 2, dtype=torch.float32)  # 2 MiB
        a = np.arange(MIB // 4, dtype=np.int64)  # 2 MiB
        w.enqueue({"t": t, "a": a})
        got = [r.dequeue(10) for r in rs]
        got[0]["t"][0] = -1.0
        got[0]["a"][0] = -1  # raises if the array is a read-only view
        assert got[1]["t"][0].item() == 0.0 and got[1]["a"][0] == 0
        assert w.statistics().arena_hits == 0
        big = torch.ones(4 * MIB, dtype=torch.float32)  # 16 MiB: vLLM's arena takes it, ringcast's too
        w.enqueue(big)
        views = [r.dequeue(10) for r in rs]
        assert w.statistics().arena_hits == 1 and all(torch.equal(v, big) for v in views)
        del views
        w.enqueue(np.ones(2 * MIB, dtype=np.int64))  # 16 MiB of numpy: vLLM's arena takes tensors only
        arrays = [r.dequeue(10) for r in rs]
        arrays[0][0] = -1
        assert w.statistics().arena_hits == 1 and arrays[1][0] == 1
    finally:
        _close_all(*rs, w)


@pytest.mark.timeout(120)
def test_ringcasts_own_arena_still_shares_from_1_mib():
    """``tensor_arena_bytes=`` (ringcast's documented opt-in): arrays of >= 1 MiB go through the
    arena and arrive as read-only views."""
    w, rs = _two_readers(tensor_arena_bytes=16 * MIB, tensor_arena_slots=2)
    try:
        w.enqueue(np.arange(MIB // 4, dtype=np.int64))
        views = [r.dequeue(10) for r in rs]
        assert w.statistics().arena_hits == 1 and not views[0].flags.writeable
        del views
    finally:
        _close_all(*rs, w)


# -- the compatibility chapter and the code agree --------------------------------------------------------
def _chapter() -> str:
    text = (ROOT / "docs" / "engine.md").read_text()
    return text.split("## vLLM 0.33 compatibility", 1)[1].split("\n## ", 1)[0]


def test_the_chapter_names_every_public_name_parameter_attribute_and_handle_field_of_vllms(vllm_surface):
    """docs/engine.md's chapter goes name by name: each public method of vLLM 0.33's class, each
    of their parameters, each public instance attribute and each Handle field (all read from
    vLLM's source) is named there, so none can be left out of the list of differences."""
    import re

    chapter = _chapter()
    named = lambda n: re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", chapter) is not None  # noqa: E731
    surface = vllm_surface["surface"]
    missing = [n for n in surface if n != "__init__" and not named(n)]
    params = {p[0] for d in surface.values() if d["params"] for p in d["params"]} - {"self", "cls"}
    missing += [f"parameter {p}" for p in sorted(params) if not named(p)]
    missing += [f"attribute {a}" for a in vllm_surface["attrs"] if not named(a)]
    missing += [f"Handle.{f}" for f in vllm_surface["handle_fields"] if not named(f)]
    assert not missing, f"docs/engine.md's vLLM 0.33 chapter does not name {missing}"


def test_ringcasts_handle_reads_every_field_of_vllms(vllm_surface):
    w = MessageQueue(1, 1, None, 4096, 2)
    try:
        h = w.export_handle()
        assert [f for f in vllm_surface["handle_fields"] if not hasattr(h, f)] == []
    finally:
        w.close()


def test_the_chapters_numbers_are_the_codes():
    """What the chapter states as values is what the code has."""
    from ringcast.arena import VLLM_MIN_BYTES
    from ringcast.compat import WARN_INTERVAL_ENV
    from ringcast.observers import LONG_WAIT_LOG
    from ringcast.waiting import DEFAULT_WARN

    chapter = _chapter()
    assert DEFAULT_ARENA_BYTES == 256 * MIB and "`DEFAULT_ARENA_BYTES` (256 MiB" in chapter
    assert VLLM_MIN_BYTES == 8 * MIB and "vLLM's threshold: buffers of >= 8 MiB" in chapter
    assert DEFAULT_WARN == 60 and f"`{WARN_INTERVAL_ENV}` (default 60)" in chapter
    assert LONG_WAIT_LOG.split(" %d ")[0] in chapter
    w = MessageQueue(1, 1)
    try:
        assert w.buffer.segment.allocated_bytes() <= 8 * 1024 and "(8 KiB at the defaults" in chapter
    finally:
        w.close()


def child_torch_subgroup_single_reader(rank: int, store: str) -> dict:
    """Global rank ``rank`` of a 3-rank gloo world: the vLLM-shaped call on the torch subgroup of
    global ranks [1, 2], reader = ``self.ranks[0]`` = global rank 1, and with a global rank no
    member has."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=3)
    try:
        sub = dist.new_group([1, 2])  # every rank makes it, as torch requires
        out: dict = {}
        if rank in (1, 2):
            mq, handles = MessageQueue.create_from_process_group_single_reader(sub, 4096, 4, reader_rank=1)
            readers = [MessageQueue.create_from_handle(h, 0) for h in handles]
            try:
                ts = [threading.Thread(target=q.wait_until_ready, args=(20,)) for q in readers]
                for t in ts:
                    t.start()
                dist.barrier(group=sub)  # every reader has joined
                mq.wait_until_ready(20)
                mq.enqueue(("from", rank))
                for t in ts:
                    t.join(20)
                out["got"] = [q.dequeue(10) for q in readers]
                dist.barrier(group=sub)
            finally:
                for q in readers:
                    q.close()
                mq.close()
            try:
                MessageQueue.create_from_process_group_single_reader(sub, 4096, 4, reader_rank=0)
            except ValueError as e:
                out["error"] = str(e)
        dist.barrier()
        return out
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(240)
def test_single_reader_on_a_torch_subgroup_reads_global_ranks(tmp_path):
    """The issue's case: on a torch subgroup of global ranks [1, 2], ``reader_rank=1`` (what
    vLLM's GroupCoordinator passes) made global rank 2 the reader; global rank 1 must be."""
    pytest.importorskip("torch.distributed")
    with Children(timeout=200) as ch:
        for rank in range(3):
            ch.start(rank, child_torch_subgroup_single_reader, rank, str(tmp_path / "store"))
        res = ch.wait()
    assert res[0] == {}
    assert res[1]["got"] == [("from", 1), ("from", 2)] and res[2]["got"] == []
    for r in (1, 2):
        assert "reader_rank=0 is read as a global rank" in res[r]["error"] and "global ranks [1, 2]" in res[r]["error"]
