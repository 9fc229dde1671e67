"""ringcast.pickling: parts are the pickle of today, in order, and alias only what the doc says."""

from __future__ import annotations

import pickle
import threading

import pytest

from ringcast.errors import PayloadError
from ringcast.framing import Unpickler
from ringcast.pickling import BY_REFERENCE_MIN, COALESCE_BELOW, PartsPickler, rebuild_tensor

np = pytest.importorskip("numpy")

_DEFAULT = PartsPickler()


def dump_parts(obj) -> tuple[list, int, list, int]:
    """``PartsPickler().dump(obj)`` with one shared instance (``oob=True``, no tensors)."""
    return _DEFAULT.dump(obj)


def owned(parts: list) -> list:
    """``parts`` with every part that may alias a mutable object copied (``bytes`` kept as is)."""
    return [p if type(p) is bytes else bytes(p) for p in parts]


def loads_parts(parts, buffers=()):
    """Unpickle a pickle given as parts, with out-of-band ``buffers``."""
    return pickle.loads(parts[0] if len(parts) == 1 else b"".join(parts), buffers=buffers)

BIG = BY_REFERENCE_MIN + 123


def _reference(obj) -> tuple[bytes, list[bytes]]:
    """What the queue's serializer produced before parts: pickle.dumps with out-of-band buffers."""
    bufs: list = []
    main = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    return main, [bytes(b.raw()) for b in bufs]


def _check(obj, pickler: PartsPickler | None = None):
    """Wire-identical to the reference, lengths exact; returns what loads_parts rebuilds."""
    parts, main_len, buffers, total = (pickler or PartsPickler()).dump(obj)
    main, ref_bufs = _reference(obj)
    assert b"".join(parts) == main
    assert main_len == len(main) == sum(len(p) for p in parts)
    assert [bytes(b) for b in buffers] == ref_bufs
    assert total == len(main) + sum(len(b) for b in ref_bufs)
    for p in parts:
        assert type(p) in (bytes, bytearray) or (p.ndim == 1 and p.format == "B")
    return loads_parts(parts, [bytearray(b) for b in buffers])


def _payload(n: int, seed: int = 0) -> bytes:
    return bytes((i * 131 + seed) & 0xFF for i in range(256)) * (n // 256) + b"x" * (n % 256)


@pytest.mark.parametrize(
    "obj",
    [
        None,
        0,
        "",
        b"",
        {"a": 1, "b": [1.5, "x", (None, True)]},
        {"nested": {"deeper": {"blob": _payload(BIG), "n": 3}, "after": b"tail"}},
        [_payload(BIG, k) for k in range(4)],
        list(range(50_000)),  # several ~64 KiB frames
        ("s" * (BIG + 1), _payload(100)),
    ],
    ids=["none", "int", "str", "bytes0", "small-dict", "nested-big", "many-big", "frames", "str-big"],
)
def test_plain_objects_match_pickle_dumps(obj):
    assert _check(obj) == obj


def test_large_bytes_are_passed_by_reference_and_small_writes_coalesced():
    blob = _payload(1 << 20)
    parts, main_len, buffers, total = dump_parts({"a": 1, "blob": blob, "meta": list(range(10))})
    assert any(p is blob for p in parts)  # no copy of the payload
    assert len(parts) == 3 and buffers == [] and total == main_len
    many = [_payload(BIG, k) for k in range(50)]
    parts = dump_parts(many)[0]
    assert len(parts) <= 2 * len(many) + 1
    small = [p for p in parts if len(p) < COALESCE_BELOW]
    assert all(len(a) >= COALESCE_BELOW or len(b) >= COALESCE_BELOW for a, b in zip(parts, parts[1:]))
    assert len(small) <= len(many) + 1


def test_bytearray_and_memoryview_content_and_aliasing():
    ba = bytearray(_payload(BIG))
    mv = memoryview(bytearray(_payload(BIG, 7)))
    obj = {"ba": ba, "small": bytearray(b"abc"), "pb": pickle.PickleBuffer(mv)}
    parts, _, buffers, _ = dump_parts(obj)
    assert any(isinstance(p, bytearray) and p is ba for p in parts)  # aliased, as documented
    got = _check(obj)
    assert got["ba"] == ba and got["small"] == bytearray(b"abc") and bytes(got["pb"]) == bytes(mv)
    # Mutation after owned(): the copies do not change.
    kept = owned(parts)
    kept_bufs = owned(buffers)
    before = pickle.loads(b"".join(kept), buffers=kept_bufs)
    ba[:4] = b"ZZZZ"
    mv[:4] = b"YYYY"
    after = pickle.loads(b"".join(kept), buffers=kept_bufs)
    assert after["ba"] == before["ba"] and after["ba"][:4] != b"ZZZZ"
    assert bytes(after["pb"])[:4] != b"YYYY"
    assert all(type(p) is bytes for p in kept + kept_bufs)


def test_bytes_parts_are_immutable_so_mutation_after_dump_is_harmless():
    blob = _payload(BIG)
    data = {"blob": blob, "list": [1, 2]}
    parts = dump_parts(data)[0]
    data["list"].append(3)  # the pickle was taken before: not affected
    assert loads_parts(parts) == {"blob": blob, "list": [1, 2]}


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", ["uint8", "int64", "float32", "complex128", "bool"])
def test_numpy_contiguous_goes_out_of_band(dtype, order):
    a = np.asarray(np.arange(3 * 5 * 7).reshape(3, 5, 7) % 2 == 0 if dtype == "bool" else np.arange(105).reshape(3, 5, 7), dtype=dtype, order=order)
    parts, _, buffers, _ = dump_parts({"a": a})
    assert len(buffers) == 1 and buffers[0].nbytes == a.nbytes
    got = _check({"a": a})["a"]
    assert got.dtype == a.dtype and got.shape == a.shape and np.array_equal(got, a)
    snapshot = [bytes(b) for b in owned(buffers)]
    a.flat[0] = not a.flat[0] if dtype == "bool" else 99  # mutate after: owned copies unchanged
    assert not np.array_equal(np.frombuffer(snapshot[0], dtype=a.dtype), np.ravel(a, order="K"))


@pytest.mark.parametrize("shape", [(), (0,), (0, 3)])
def test_numpy_zero_d_and_empty(shape):
    a = np.full(shape, 7, dtype=np.int32)
    got = _check([a, a])  # the same object twice: memoised, both rebuilt
    assert all(g.shape == a.shape and np.array_equal(g, a) for g in got)


def test_numpy_non_contiguous_is_copied_in_band():
    base = np.arange(200_000, dtype=np.int64).reshape(400, 500)
    for view in (base[:, ::3], base.T[::2], base[::-1]):
        got = _check({"v": view})["v"]
        assert np.array_equal(got, view)
        parts, _, buffers, _ = dump_parts({"v": view})
        assert buffers == [] or all(type(b) is bytes for b in buffers)  # a private copy


def _torch():
    return pytest.importorskip("torch")


def _tensor_dtypes(t):
    return [t.bool, t.uint8, t.int8, t.int16, t.int32, t.int64, t.float16, t.bfloat16, t.float32, t.float64, t.complex64]


@pytest.mark.parametrize("tensors", [False, True], ids=["torch-reduce", "oob-tensors"])
def test_torch_tensors_every_dtype(tensors):
    t = _torch()
    pp = PartsPickler(tensors=tensors)
    for dtype in _tensor_dtypes(t):
        for shape in [(), (0,), (2, 0), (3, 4), (70_000,)]:
            x = (t.arange(int(t.tensor(shape).prod()) if shape else 1) % 3).to(dtype).reshape(shape)
            parts, main_len, buffers, total = pp.dump({"x": x, "meta": [dtype, shape]})
            assert total == main_len + sum(b.nbytes if isinstance(b, memoryview) else len(b) for b in buffers)
            if tensors and x.numel():
                assert len(buffers) == 1 and buffers[0].nbytes == x.numel() * x.element_size()
            got = loads_parts(parts, [bytearray(b) for b in buffers])
            y = got["x"]
            assert y.dtype == dtype and y.shape == x.shape and t.equal(y, x), (dtype, shape)
            assert got["meta"] == [dtype, shape]


def test_torch_tensor_without_tensors_option_is_byte_identical():
    t = _torch()
    x = t.arange(10)
    main, bufs = _reference({"x": x})
    parts, _, buffers, _ = PartsPickler().dump({"x": x})
    assert b"".join(parts) == main and [bytes(b) for b in buffers] == bufs


def test_torch_non_contiguous_grad_and_mutation():
    t = _torch()
    pp = PartsPickler(tensors=True)
    base = t.arange(1000, dtype=t.float32).reshape(20, 50)
    for x in (base.t(), base[:, ::7], base[3]):
        parts, _, buffers, _ = pp.dump(x)
        assert t.equal(loads_parts(parts, [bytearray(b) for b in buffers]), x)
    g = t.ones(3, requires_grad=True)  # torch's own reduction, rebuilt with requires_grad
    parts, _, buffers, _ = pp.dump(g)
    assert buffers == [] and loads_parts(parts).requires_grad
    x = t.zeros(100_000, dtype=t.int32)
    parts, _, buffers, _ = pp.dump(x)
    kept = owned(buffers)
    x[0] = 5  # mutation after: owned copies unchanged, the aliasing view sees it
    assert loads_parts(parts, [bytearray(b) for b in kept])[0].item() == 0
    assert loads_parts(parts, [bytearray(b) for b in buffers])[0].item() == 5


def test_rebuild_tensor_from_read_only_memory():
    t = _torch()
    y = rebuild_tensor(b"\x01\x00\x02\x00", (2,), "int16")
    assert y.tolist() == [1, 2]


def test_unpicklable_raises_payload_error_and_pickler_stays_usable():
    pp = PartsPickler()
    with pytest.raises(PayloadError, match="cannot pickle dict"):
        pp.dump({"lock": threading.Lock(), "blob": _payload(BIG)})
    assert _check({"ok": 1}, pp) == {"ok": 1}


def test_memo_is_cleared_between_dumps():
    pp = PartsPickler()
    shared = ["same"]
    first = pp.dump([shared, shared])[0]
    second = pp.dump(shared)[0]
    assert b"".join(second) == pickle.dumps(shared, protocol=5)
    assert pickle.loads(b"".join(first)) == [["same"], ["same"]]


def test_reentrant_and_threaded_dumps_use_their_own_pickler():
    pp = PartsPickler()

    class Inner:
        def __reduce__(self):
            inner = b"".join(pp.dump({"inner": 1})[0])  # re-enters while the outer dump runs
            return (pickle.loads, (inner,))

    assert _check([Inner(), 2], pp) == [{"inner": 1}, 2]
    results = []

    def work(k):
        for i in range(200):
            obj = {"k": k, "i": i, "blob": _payload(BIG, k) if i % 50 == 0 else b""}
            results.append(loads_parts(pp.dump(obj)[0]) == obj)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert len(results) == 600 and all(results)


def test_parts_read_back_from_a_chunk_view_and_through_an_allow_list():
    """The queue's reading side (framing.Unpickler) reads the parts, written back to back after
    the inline marker, in place from the chunk's view; an allow-list refuses what it lacks."""
    import collections

    obj = {"a": [1, 2, 3], "b": _payload(BIG)}
    chunk = bytearray(b"\x00" + b"".join(dump_parts(obj)[0]) + b"stale bytes after STOP")
    assert Unpickler().from_chunk(memoryview(chunk)) == obj
    assert Unpickler(frozenset()).from_chunk(memoryview(chunk)) == obj  # plain data needs no entry
    od = bytearray(b"\x00" + b"".join(dump_parts(collections.OrderedDict(a=1))[0]))
    with pytest.raises(PayloadError, match="collections.OrderedDict"):
        Unpickler(frozenset()).from_chunk(memoryview(od))


def test_in_band_buffers_with_oob_off_are_parts_by_reference():
    a = np.arange(BIG, dtype=np.uint8)
    f = np.asfortranarray(np.arange(40_000, dtype=np.int32).reshape(200, 200))
    pb = pickle.PickleBuffer(f)  # Fortran-contiguous memory, pickled in band
    obj = {"a": a, "f": f, "pb": pb}
    parts, main_len, buffers, total = PartsPickler(oob=False).dump(obj)
    assert buffers == [] and total == main_len
    assert b"".join(parts) == pickle.dumps(obj, protocol=5)
    assert any(isinstance(p, memoryview) and p.nbytes == a.nbytes for p in parts)  # not copied
    got = loads_parts(parts)
    assert np.array_equal(got["a"], a) and np.array_equal(got["f"], f)
    assert bytes(got["pb"]) == bytes(pickle.PickleBuffer(f).raw())


class _Reenters:
    """Its reduction pickles something else with the same (one-thread) pickler."""

    pickler = None

    def __reduce__(self):
        inner = _Reenters.pickler.dump({"inner": list(range(5))})
        return (dict, ({"k": b"".join(inner[0])},))


def test_one_thread_pickler_is_reentrant_and_matches_dumps():
    pp = PartsPickler(one_thread=True, tensors=True)
    _Reenters.pickler = pp
    obj = {"a": [1, 2, 3], "blob": b"z" * 100_000}
    parts, main_len, bufs, total = pp.dump(obj)
    assert b"".join(parts) == pickle.dumps(obj, protocol=5) and main_len == total and not bufs
    parts, _, _, _ = pp.dump([_Reenters(), obj])
    got = pickle.loads(b"".join(parts))
    assert got[1] == obj and pickle.loads(got[0]["k"]) == {"inner": list(range(5))}
