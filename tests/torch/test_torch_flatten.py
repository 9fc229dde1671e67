"""One-level dataclass flattening: exact round trips (Hypothesis), key types kept, clear errors."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

pytest.importorskip("torch")

from hypothesis import given, strategies as st  # noqa: E402

from ringcast.torch import decode_key, encode_key, from_flatten_dict, to_flatten_dict  # noqa: E402

scalars = st.one_of(
    st.integers(),
    st.text(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.binary(max_size=8),
)
values = st.one_of(scalars, st.lists(st.integers(), max_size=3), st.tuples(st.integers(), st.text(max_size=3)))


@dataclass
class Inputs:
    step: int
    positions: dict = field(default_factory=dict)
    names: dict = field(default_factory=dict)
    note: object = None
    nested: list = field(default_factory=list)


def _dicts():
    # bool/int/float keys that compare equal collapse in a dict; key types are kept exactly anyway
    return st.dictionaries(scalars, values, max_size=6)


@given(st.integers(), _dicts(), _dicts(), values)
def test_round_trip_is_exact(step, positions, names, note):
    x = Inputs(step, positions, names, note, [positions])
    flat = to_flatten_dict(x)
    y = from_flatten_dict(Inputs, flat)
    assert y == x
    # key types and order survive, not just equality (1 == 1.0 == True)
    assert [type(k) for k in y.positions] == [type(k) for k in x.positions]
    assert list(y.positions) == list(x.positions)
    assert all(isinstance(k, str) for k in flat)


@given(scalars)
def test_keys_round_trip(key):
    text = encode_key(key)
    back = decode_key(text)
    assert type(back) is type(key) and (back == key or (isinstance(key, float) and math.isnan(key)))


def test_special_floats_and_layout():
    assert decode_key(encode_key(math.inf)) == math.inf
    assert math.isnan(decode_key(encode_key(math.nan)))
    assert str(decode_key(encode_key(-0.0))) == "-0.0"
    flat = to_flatten_dict(Inputs(1, {128: "a", "128": "b", 1.5: "c", None: "d"}))
    assert flat == {"step": 1, "positions.": 4, "positions.128": "a", "positions.'128'": "b", "positions.1.5": "c", "positions.None": "d", "names.": 0, "note": None, "nested": []}
    assert from_flatten_dict(Inputs, flat).positions == {128: "a", "128": "b", 1.5: "c", None: "d"}


def test_entry_order_does_not_matter_for_markers():
    flat = {"positions.7": "a", "step": 1, "positions.": 1}
    assert from_flatten_dict(Inputs, flat) == Inputs(1, {7: "a"})


def test_empty_dicts_survive():
    x = Inputs(0)
    assert from_flatten_dict(Inputs, to_flatten_dict(x)) == x


@pytest.mark.parametrize(
    "flat, pattern",
    [
        ({"step": 1, "bogus": 2}, r"'bogus' does not fit Inputs: it has no field 'bogus'"),
        ({"step": 1, "bogus.3": 2}, r"'bogus.3' does not fit Inputs"),
        ({"step": 1, "step.3": 2}, r"'step.3': field 'step' is not a flattened dict"),
        ({"step": 1, "positions.": 1, "positions.12x": 2}, r"'positions.12x'.*not an encoded scalar key"),
        ({"step": 1, "positions.": 2, "positions.1": 2}, r"marker says 2 keys but 1 arrived"),
        ({"positions.": 0}, r"fields \['step'\] are missing"),
        ({"step": 1, "step.": 0}, r"given both as a value and as a dict"),
        ({"step": 1, "positions.": 1, "positions.int": 2}, r"not an encoded scalar key"),
    ],
)
def test_keys_that_do_not_fit(flat, pattern):
    with pytest.raises(ValueError, match=pattern):
        from_flatten_dict(Inputs, flat)


def test_bad_inputs():
    with pytest.raises(TypeError, match="dataclass"):
        to_flatten_dict({"a": 1})
    with pytest.raises(TypeError, match="instance"):
        to_flatten_dict(Inputs)
    with pytest.raises(TypeError, match="class"):
        from_flatten_dict(Inputs(1), {})
    with pytest.raises(TypeError, match=r"field 'positions' of Inputs: dict keys must be scalars.*tuple"):
        to_flatten_dict(Inputs(1, {(1, 2): 3}))


def test_frozen_and_init_false():
    @dataclass(frozen=True)
    class F:
        a: dict
        b: int = field(init=False, default=7)

    x = F({1: 2})
    object.__setattr__(x, "b", 9)
    y = from_flatten_dict(F, to_flatten_dict(x))
    assert y == x and y.b == 9 and dataclasses.is_dataclass(y)


def test_core_does_not_import_torch_and_subpackage_gets_real_torch():
    code = (
        "import sys, ringcast; assert 'torch' not in sys.modules, 'import ringcast imported torch'\n"
        "import ringcast.torch as rt, torch; assert hasattr(torch, 'distributed') and torch.__name__ == 'torch'\n"
        "import inspect; src = inspect.getsource(ringcast.MessageQueue.create_from_process_group)\n"
        "assert 'from .groups import queue_from_group' in src  # vLLM's spelling, through the group layer below the queue\n"
        "import ringcast.groups  # the group layer imports neither the queue nor the torch half\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
