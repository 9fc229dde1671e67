"""Transports compared by ``ringcast bench``: one writer (this process), N reader processes.

Each transport has a writer half (``prepare`` before the readers start, ``connect`` after,
``send``, ``close``) and a reader half built in the child by :func:`open_reader` (``recv``,
``close``). Every transport moves the same Python objects (pickled by the transport itself, the
way an application would use it):

* ``ringcast`` - :class:`ringcast.MessageQueue` (default wait policy);
* ``arena``    - the same with a tensor arena (``tensor_arena_bytes``: 3 slots of 72 MiB), so that
  numpy arrays and CPU tensors of >= 1 MiB reach the readers as views of a shared slot;
* ``zmq``      - pyzmq PUB/SUB over ``ipc://`` (:mod:`.zmqfloor`); ``zmq-remote``, ``zmq-remote-curve``
  and ``zmq-remote-aes``: the same over TCP on 127.0.0.1, in clear, with CurveZMQ, and with every
  frame sealed and opened with AES-256-GCM: the floor of each remote mode (:data:`REMOTE_FLOOR`;
  no protocol, no copy at ``enqueue``: what the kernel, ZeroMQ, pickle and the mode's cipher cost
  on their own);
* ``pipe``     - one ``multiprocessing.Pipe`` per reader; the writer pickles once and
  ``send_bytes`` to each;
* ``torch``    - ``torch.distributed.broadcast_object_list`` on a gloo group (FileStore
  rendezvous: no port); only when torch is importable;
* ``vllm``     - vLLM's ``shm_broadcast.MessageQueue``: from an installed vLLM when importable, or
  from the loader named by ``ringcast bench --vllm-loader`` (:func:`load_message_queue_class`: a
  Python file or module that provides ``MessageQueue`` or ``load_vllm_shm_broadcast()``, such as
  ``../shared/peers/vllm_peer.py``); never a dependency. It runs with its own defaults.
* ``remote``, ``remote-aes``, ``remote-insecure`` - ringcast with remote readers only
  (``n_local_reader=0``, TCP on 127.0.0.1): CurveZMQ (the default), ``remote_security="aes-gcm"``,
  ``remote_insecure=True``; ``vllm-remote``: vLLM's queue
  in the same shape (cleartext). ``overflow`` / ``vllm-overflow`` (the second harness only): local
  readers on 1 MiB chunks, so a 1 MiB message overflows to the socket. :data:`FAMILY`,
  :data:`PEER`, :func:`queue_shape`;
* ``floor``    - not a transport anyone should use: the least a shared-memory broadcast of a
  Python object can cost (:mod:`.floor`): ringcast's serialisation, one copy into one of 10 rotating
  slots, one ``pickle.loads`` out, one sequence word and one ack word per reader, no protocol.
  Slots of 2 MiB (``capacity``): ``tensor64m`` is not run on it (``python -m
  ringcast_lab.bench.harness`` has a 64 MiB floor beside the tensor arena).

A writer's ``capacity`` (bytes of ``pickle.dumps`` of a message; None: no limit) is the largest
message it takes; the runner skips cases above it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import sys
import tempfile
from pathlib import Path

from ringcast.errors import RingcastError

from .zmqfloor import ZMQ_NAMES, ZmqWriter, open_zmq_reader

__all__ = ["TRANSPORTS", "FAMILY", "PEER", "REMOTE_FLOOR", "BenchLoaderError", "available", "load_message_queue_class", "make_writer", "open_reader",
           "queue_shape"]

_READY_TIMEOUT = 120.0
#: the family of each implementation whose readers are not local readers of the default ring:
#: remote (TCP on 127.0.0.1) or local on 1 MiB chunks, where a 1 MiB message overflows
FAMILY = {"remote": "remote", "remote-aes": "remote", "remote-insecure": "remote", "vllm-remote": "remote", "zmq-remote": "remote",
          "zmq-remote-curve": "remote", "zmq-remote-aes": "remote",
          "overflow": "overflow", "vllm-overflow": "overflow"}
#: the floor of each remote ringcast mode: ZeroMQ's own sockets, nothing of a queue, with only that
#: mode's cipher work on the same bytes (issue 53: CurveZMQ's sockets for CURVE, the same AEAD for aes-gcm)
REMOTE_FLOOR = {"remote-insecure": "zmq-remote", "remote": "zmq-remote-curve", "remote-aes": "zmq-remote-aes"}
#: each ringcast implementation and the vLLM one it is compared with
PEER = {"ringcast": "vllm", "ringcast-poll": "vllm", "arena": "vllm", "remote": "vllm-remote", "remote-aes": "vllm-remote", "remote-insecure": "vllm-remote", "overflow": "vllm-overflow"}
_OVERFLOW_CHUNK = 1 << 20
#: the constructor arguments of each ringcast implementation beyond its shape
_EXTRA = {"arena": {"tensor_arena_bytes": 3 * 72 << 20, "tensor_arena_slots": 3}, "remote-insecure": {"remote_insecure": True},
          "remote-aes": {"remote_security": "aes-gcm"}}


def queue_shape(impl: str, n: int) -> dict:
    """The arguments of ``impl``'s queue for ``n`` readers besides ``n_reader`` (ringcast's class
    and vLLM's take the same): remote readers on 127.0.0.1, or local ones (1 MiB chunks: overflow)."""
    if FAMILY.get(impl) == "remote":
        return {"n_local_reader": 0, "connect_ip": "127.0.0.1"}
    return {"n_local_reader": n, **({"max_chunk_bytes": _OVERFLOW_CHUNK} if FAMILY.get(impl) == "overflow" else {})}


def _has(mod: str) -> bool:
    try:
        return importlib.util.find_spec(mod) is not None
    except (ImportError, ValueError):
        return False


class _RingcastWriter:
    """ringcast's ``MessageQueue`` as implementation ``name``: ``ringcast``, ``arena``, ``remote``,
    ``remote-insecure`` or ``overflow`` (:func:`queue_shape`, ``_EXTRA``)."""

    def __init__(self, spin: float | None = None, name: str = "ringcast") -> None:
        self.name = name
        # Readers of one transport sit idle while the others are measured: no long-wait warnings.
        self.kw = {"warn_interval": 3600.0} if spin is None else {"spin": spin, "warn_interval": 3600.0}

    def _cls(self):
        from ringcast.queue import MessageQueue

        return MessageQueue

    def prepare(self, n: int):
        self.mq = self._cls()(n, **queue_shape(self.name, n), **self.kw, **_EXTRA.get(self.name, {}))
        return self.mq.export_handle()

    def reader_info(self, info, i):
        return (info, self.kw)

    def connect(self) -> None:
        self.mq.wait_until_ready(timeout=_READY_TIMEOUT)

    def send(self, obj) -> None:
        self.mq.enqueue(obj)

    def close(self) -> None:
        mq = getattr(self, "mq", None)
        if mq is not None:
            mq.close()


class BenchLoaderError(RingcastError, ImportError):
    """The ``--vllm-loader`` of ``ringcast bench`` cannot give a ``MessageQueue`` class."""


_loaded: dict[str, type] = {}


def _import_loader(spec: str):
    path = Path(spec).expanduser()
    if spec.endswith(".py") or os.sep in spec:
        if not path.is_file():
            raise BenchLoaderError(
                f"--vllm-loader {spec!r}: no such file ({path.resolve()}); name a Python file that provides "
                "MessageQueue or load_vllm_shm_broadcast(), e.g. ../shared/peers/vllm_peer.py, or an importable module"
            )
        name = path.stem  # registered under its own name: pickles referring to it (handles) resolve
        mod = sys.modules.get(name)
        if mod is not None and Path(getattr(mod, "__file__", "") or "").resolve() == path.resolve():
            return mod
        file_spec = importlib.util.spec_from_file_location(name, path)
        if file_spec is None or file_spec.loader is None:
            raise BenchLoaderError(f"--vllm-loader {spec!r}: {path} cannot be loaded as a Python module")
        mod = importlib.util.module_from_spec(file_spec)
        sys.modules[name] = mod
        try:
            file_spec.loader.exec_module(mod)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return mod
    return importlib.import_module(spec)


def load_message_queue_class(spec: str) -> type:
    """The ``MessageQueue`` class named by ``spec``: a path to a Python file, or a module name.

    The module provides ``MessageQueue`` itself, or ``load_vllm_shm_broadcast()`` returning a module
    that does (``vllm_peer.py``). Loaded once per process; raises :class:`BenchLoaderError`.
    """
    cls = _loaded.get(spec)
    if cls is not None:
        return cls
    try:
        mod = _import_loader(spec)
        if not hasattr(mod, "MessageQueue") and callable(getattr(mod, "load_vllm_shm_broadcast", None)):
            mod = mod.load_vllm_shm_broadcast()
    except BenchLoaderError:
        raise
    except Exception as e:
        raise BenchLoaderError(f"--vllm-loader {spec!r} failed to load: {type(e).__name__}: {e}") from e
    cls = getattr(mod, "MessageQueue", None)
    if not isinstance(cls, type):
        raise BenchLoaderError(
            f"--vllm-loader {spec!r}: module {mod.__name__} has no MessageQueue class and no "
            "load_vllm_shm_broadcast() that returns a module with one"
        )
    _loaded[spec] = cls
    return cls


class _VllmWriter(_RingcastWriter):
    """vLLM's ``MessageQueue`` as ``vllm``, ``vllm-remote`` or ``vllm-overflow``, with its defaults."""

    def __init__(self, spin: float | None = None, loader: str | None = None, name: str = "vllm") -> None:
        self.name = name
        self.kw = {}
        if loader is not None and Path(loader).expanduser().is_file():
            loader = str(Path(loader).expanduser().resolve())  # the readers may start elsewhere
        self.loader = loader

    def _cls(self):
        if self.loader is not None:
            return load_message_queue_class(self.loader)
        from vllm.distributed.device_communicators.shm_broadcast import MessageQueue

        return MessageQueue

    def reader_info(self, info, i):
        # Pickled here, unpickled after the loader ran in the reader: a loaded module's handle
        # may refer to the loader module, which the reader can import only then.
        return (pickle.dumps(info), self.kw, self.loader)

    def connect(self) -> None:
        self.mq.wait_until_ready()

    def close(self) -> None:  # older vLLM releases have no close()
        mq = getattr(self, "mq", None)
        if mq is not None and hasattr(mq, "close"):
            mq.close()


class _PipeWriter:
    name = "pipe"

    def prepare(self, n: int):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.pairs = [ctx.Pipe(duplex=False) for _ in range(n)]
        return None

    def reader_info(self, info, i):
        return self.pairs[i][0]

    def connect(self) -> None:
        for r, _w in self.pairs:
            r.close()  # the child has its own copy now
        self.ws = [w for _r, w in self.pairs]

    def send(self, obj) -> None:
        data = pickle.dumps(obj, protocol=5)
        for w in self.ws:
            w.send_bytes(data)

    def close(self) -> None:
        for r, w in getattr(self, "pairs", []):
            r.close()
            w.close()
        self.pairs = []


class _TorchWriter:
    name = "torch"

    def prepare(self, n: int):
        self.n = n
        fd, self.path = tempfile.mkstemp(prefix="ringcast-bench-gloo-")
        os.close(fd)
        os.unlink(self.path)  # FileStore creates it; a stale file would confuse the rendezvous
        return (f"file://{self.path}", n + 1)

    def reader_info(self, info, i):
        return info

    def connect(self) -> None:
        import datetime

        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"file://{self.path}", rank=0, world_size=self.n + 1, timeout=datetime.timedelta(seconds=600))
        self.dist = dist

    def send(self, obj) -> None:
        self.dist.broadcast_object_list([obj], src=0)

    def close(self) -> None:
        d = getattr(self, "dist", None)
        if d is not None and d.is_initialized():
            d.destroy_process_group()
        try:
            os.unlink(self.path)
        except (FileNotFoundError, AttributeError):
            pass


_FLOOR_SLOT = 2 << 20  # bytes per floor slot (the 1 MiB cases fit; tensor64m is skipped)


class _FloorWriter:
    """:class:`.floor.FloorWriter`: 10 slots of 2 MiB, like ringcast's 10 chunks."""

    name = "floor"
    capacity = _FLOOR_SLOT - 4096  # headroom for the parts' framing

    def prepare(self, n: int):
        from .floor import FloorWriter

        self.w = FloorWriter(n, _FLOOR_SLOT, 10)
        return self.w.handle()

    def reader_info(self, info, i):
        return info

    def connect(self) -> None:
        self.w.wait_attached(_READY_TIMEOUT)

    def send(self, obj) -> None:
        self.w.send(obj)

    def close(self) -> None:
        if getattr(self, "w", None) is not None:
            self.w.close()
            self.w = None


TRANSPORTS = {"ringcast": _RingcastWriter, "ringcast-poll": _RingcastWriter, "arena": _RingcastWriter, "remote": _RingcastWriter, "remote-aes": _RingcastWriter, "remote-insecure": _RingcastWriter,
              "overflow": _RingcastWriter, "zmq": ZmqWriter, "zmq-remote": ZmqWriter, "zmq-remote-curve": ZmqWriter, "zmq-remote-aes": ZmqWriter, "pipe": _PipeWriter, "floor": _FloorWriter, "torch": _TorchWriter,
              "vllm": _VllmWriter, "vllm-remote": _VllmWriter, "vllm-overflow": _VllmWriter}
#: what ``ringcast bench`` runs (the overflow family is the second harness's)
_BENCH = ("ringcast", "ringcast-poll", "arena", "remote", "remote-aes", "remote-insecure", "zmq", "pipe", "floor", "zmq-remote", "zmq-remote-curve",
          "zmq-remote-aes")


def available(vllm_loader: str | None = None) -> dict:
    """Transports of ``ringcast bench`` usable here (without importing torch or vLLM; a
    ``vllm_loader`` is loaded)."""
    out = {n: TRANSPORTS[n] for n in _BENCH if n not in ("remote-aes", "zmq-remote-aes") or _has("cryptography")}
    if _has("torch"):
        out["torch"] = _TorchWriter
    if vllm_loader is not None:
        load_message_queue_class(vllm_loader)
    if vllm_loader is not None or _has("vllm"):
        out["vllm"] = out["vllm-remote"] = _VllmWriter
    return out


def make_writer(name: str, spin: float | None = None, vllm_loader: str | None = None):
    """``spin``: the ringcast wait policy's spin budget (None: library default); ``vllm_loader``:
    see :func:`load_message_queue_class` (None: an installed vLLM)."""
    cls = TRANSPORTS[name]
    if cls is _VllmWriter:
        return _VllmWriter(spin, vllm_loader, name)
    if cls is _RingcastWriter:
        return _RingcastWriter(spin, name)
    if cls is ZmqWriter:
        return ZmqWriter(name)
    return cls()


def _poll_driven(mq):
    """``ringcast-poll``'s receive: the event loop's way, on the queue's descriptor (issue 51):
    ``dequeue_nowait``, and while it has nothing, ``select`` on ``fileno()``."""
    import select

    from ringcast import NOTHING

    fd, nowait, wait = mq.fileno(), mq.dequeue_nowait, select.select

    def recv():
        m = nowait()
        while m is NOTHING:
            wait((fd,), (), ())
            m = nowait()
        return m

    return recv


def open_reader(name: str, info, index: int):
    """In the reader process: ``(recv, close)``; returns once connected."""
    if TRANSPORTS.get(name) in (_RingcastWriter, _VllmWriter):
        if not name.startswith("vllm"):
            from ringcast.queue import MessageQueue

            handle, kw = info
        else:
            pickled, kw, loader = info
            MessageQueue = _VllmWriter(None, loader)._cls()
            handle = pickle.loads(pickled)
        mq = MessageQueue.create_from_handle(handle, index, **kw)
        if not name.startswith("vllm"):
            mq.wait_until_ready(timeout=_READY_TIMEOUT)
        else:
            mq.wait_until_ready()
        if name == "ringcast-poll":
            return _poll_driven(mq), mq.close
        return mq.dequeue, getattr(mq, "close", lambda: None)
    if name == "floor":
        from .floor import FloorReader

        r = FloorReader(*info, index)
        return r.recv, r.close
    if name in ZMQ_NAMES:
        return open_zmq_reader(name, info)
    if name == "pipe":
        conn = info

        def recv():
            return pickle.loads(conn.recv_bytes())

        return recv, conn.close
    if name == "torch":
        import datetime

        import torch.distributed as dist

        init, world = info
        dist.init_process_group("gloo", init_method=init, rank=index + 1, world_size=world, timeout=datetime.timedelta(seconds=600))

        def recv():
            box = [None]
            dist.broadcast_object_list(box, src=0)
            return box[0]

        return recv, dist.destroy_process_group
    raise ValueError(f"unknown transport {name!r}")
