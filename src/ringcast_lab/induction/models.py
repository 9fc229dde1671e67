"""The manifest's models (spec/models.json) in the induction's scope, as ring.Config switches.

ring.py transcribes Ring at the SC level without parking, arena or remote readers
(spec/RingInd.tla's scope); a manifest model is in that scope when its constants outside it
have the one value ``_SCOPE`` names.  ``from_manifest`` gives such a model's switches, sizes
and TLC's distinct-state count; ``in_scope`` lists the models of one expected result (the
bad variants are the must-fail models with a safety violation).
"""
from __future__ import annotations

from ringcast_lab.tlc.models import find, manifest

from .ring import Config

#: Ring's constants ring.Config states: constant -> Config field
_SWITCHES = {"Order": "order", "SkipReader": "skip_reader", "InitWritten": "init_written", "InitRead": "init_read",
             "TwoStepPayload": "two_step", "RecvMode": "recv_mode", "TimeoutAnytime": "timeout_anytime",
             "Abort": "abort", "Evict": "evict", "EvictSkipsFlag": "evict_skips_flag", "RecvInt": "recv_int"}
#: the constants outside ring.py's scope and the one value each must have (spec/RingInd.tla's scope)
_SCOPE = {"MM": '"SC"', "Parking": "FALSE", "S": "0", "Remote": '"none"', "FalseSuspect": "{}",
          "EvictCheck": "FALSE", "CloseSet": "{}", "LoadBuffering": "FALSE", "Spin": "FALSE", "Pollers": "{}"}
#: the modules of Ring's constants: MCRing's models, and RingInd's (Lamport's method for IndInv)
MODULES = ("MCRing", "RingInd")


def _value(text: str):
    if text in ("TRUE", "FALSE"):
        return text == "TRUE"
    if text.startswith("{"):
        return tuple(int(x) for x in text.strip("{}").split(",") if x.strip())
    if text.startswith('"'):
        return text.strip('"')
    return int(text) if text.lstrip("-").isdigit() else text


def _outside(model: dict) -> dict:
    """The model's constants outside ring.py's scope that differ from their one value there."""
    if model["module"] not in MODULES:
        return {"module": model["module"]}
    consts = model["config"]["constants"]
    return {k: consts[k] for k, v in _SCOPE.items() if consts.get(k, v) != v}


def from_manifest(name: str, spec=None):
    """(Config, N, NR, M, Big, CrashSet, TLC's distinct count) of a manifest model in this scope
    (ValueError naming a constant outside it)."""
    model = find(manifest(spec), name)
    if _outside(model):
        raise ValueError(f"{name}: outside ring.py's scope: {_outside(model)}")
    consts = model["config"]["constants"]
    big, crash = _value(consts["Big"]), _value(consts["CrashSet"])
    cfg = Config(**{field: _value(consts[c]) for c, field in _SWITCHES.items()}, big=bool(big), crash=bool(crash))
    return (cfg, *(_value(consts[c]) for c in ("N", "NR", "M")), big, crash, model["distinct"])


def in_scope(expect: str, spec=None) -> list[str]:
    """The manifest's MCRing models in ring.py's scope whose expected result is ``expect``."""
    return [m["name"] for m in manifest(spec)["models"]
            if m["expect"] == expect and m["module"] == "MCRing" and not _outside(m)]
