"""One-level flattening of dataclasses whose fields may be dicts keyed by scalars.

``to_flatten_dict(obj)`` maps each field to one entry, except a ``dict`` field, which becomes
one entry per key, ``"<field>.<repr(key)>"`` (``"positions.128"`` for the int key 128,
``"names.'a'"`` for the str key ``'a'``), plus a marker ``"<field>."`` holding the number of keys
(so empty dicts survive and a lost key is noticed). ``repr`` of a scalar (int, str, float, bool,
None, bytes) reads back as exactly that value and type, so ``from_flatten_dict(cls,
to_flatten_dict(x)) == x`` for every such dataclass, key order included. Only the top level is
flattened: nested dataclasses, lists and dicts inside dict values are kept as they are.
"""

from __future__ import annotations

import ast
import dataclasses
import math

__all__ = ["to_flatten_dict", "from_flatten_dict", "encode_key", "decode_key"]

_SCALARS = (int, str, float, bool, type(None), bytes)
_SPECIAL_FLOATS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def encode_key(key) -> str:
    """The text of a scalar dict key, from which :func:`decode_key` returns an equal key of the
    same type."""
    if type(key) not in _SCALARS:
        raise TypeError(f"dict keys must be scalars (int, str, float, bool, None, bytes) to be flattened, got {type(key).__name__} {key!r}")
    return repr(key)


def decode_key(text: str):
    if text in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[text]
    try:
        key = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ValueError(f"{text!r} is not an encoded scalar key (expected the repr of an int, str, float, bool, None or bytes)") from None
    if type(key) not in _SCALARS or repr(key) != text:
        raise ValueError(f"{text!r} is not an encoded scalar key (expected the repr of an int, str, float, bool, None or bytes)")
    return key


def _check_dataclass(obj, what: str) -> None:
    if not dataclasses.is_dataclass(obj):
        raise TypeError(f"{what} expects a dataclass, got {type(obj).__name__}")


def to_flatten_dict(obj) -> dict:
    """Flatten a dataclass instance one level (see the module docstring)."""
    _check_dataclass(obj, "to_flatten_dict()")
    if isinstance(obj, type):
        raise TypeError("to_flatten_dict() expects a dataclass instance, not the class")
    out: dict = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if type(value) is dict:
            out[f"{f.name}."] = len(value)
            for k, v in value.items():
                try:
                    out[f"{f.name}.{encode_key(k)}"] = v
                except TypeError as e:
                    raise TypeError(f"field {f.name!r} of {type(obj).__name__}: {e}") from None
        else:
            out[f.name] = value
    return out


def from_flatten_dict(cls, d: dict):
    """Rebuild a ``cls`` instance from :func:`to_flatten_dict` output. Raises ``ValueError``
    naming the key when a key does not fit ``cls`` (an unknown field, an entry of a field that is
    not a dict, a malformed key, a missing field, a dict whose key count does not match)."""
    _check_dataclass(cls, "from_flatten_dict()")
    if not isinstance(cls, type):
        raise TypeError("from_flatten_dict() expects the dataclass class, not an instance")
    names = {f.name: f for f in dataclasses.fields(cls)}
    plain: dict = {}
    dicts: dict[str, dict] = {}
    counts: dict[str, int] = {}
    entries = []
    for key, value in d.items():  # first pass: plain fields and dict markers, in any order
        if not isinstance(key, str):
            raise ValueError(f"flattened keys are str, got {type(key).__name__} {key!r}")
        name, dot, rest = key.partition(".")
        if name not in names:
            raise ValueError(f"key {key!r} does not fit {cls.__name__}: it has no field {name!r} (fields: {sorted(names)})")
        if not dot:
            plain[name] = value
        elif rest == "":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"key {key!r} is a dict marker and holds the key count, got {value!r}")
            counts[name] = value
            dicts[name] = {}
        else:
            entries.append((key, name, rest, value))
    for name in plain:
        if name in counts:
            raise ValueError(f"key {name!r}: field {name!r} of {cls.__name__} is given both as a value and as a dict ({name + '.'!r})")
    for key, name, rest, value in entries:  # second pass: dict entries, in their order
        if name not in counts:
            raise ValueError(f"key {key!r}: field {name!r} is not a flattened dict here (no marker {name + '.'!r})")
        try:
            k = decode_key(rest)
        except ValueError as e:
            raise ValueError(f"key {key!r} of {cls.__name__}: {e}") from None
        dicts[name][k] = value
    for name, n in counts.items():
        if len(dicts[name]) != n:
            raise ValueError(f"field {name!r} of {cls.__name__}: the marker says {n} keys but {len(dicts[name])} arrived")
    kwargs = {**plain, **dicts}
    init = {k: v for k, v in kwargs.items() if names[k].init}
    missing = [n for n, f in names.items() if f.init and n not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"cannot build {cls.__name__}: fields {missing} are missing from the flattened dict")
    obj = cls(**init)
    for k, v in kwargs.items():
        if not names[k].init:
            object.__setattr__(obj, k, v)
    return obj
