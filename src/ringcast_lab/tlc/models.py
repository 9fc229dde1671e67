"""The models of ``spec/models.json``: the one source of every model's TLC configuration.

The manifest states once, per spec module (``modules``), the constants every model of that
module shares (``constants``: JSON values, rendered as TLA+: ``true`` -> ``TRUE``, ``[1, 3]`` ->
``{1, 3}``, ``"owed"`` -> ``"owed"``; a constant named in ``substituted`` is replaced by a
definition of the module: ``Order <- OrderCorrect``), its SPECIFICATION, INVARIANTS and
PROPERTIES. A model states only its differences: ``like`` (an earlier model of the same module
whose configuration it starts from, else the module's), ``constants`` (overrides), and
``invariants`` / ``properties`` (space separated, replacing the inherited ones; "" for none).
:func:`load_manifest` resolves each model's whole configuration (``config``), :func:`render_cfg`
writes it as the ``.cfg`` text TLC reads (``tools/tlc.py --print-cfg NAME`` prints it), and
:func:`model_constants` gives its constants as TLA+ text, as a ``.cfg`` would assign them.
"""
from __future__ import annotations

import json
from pathlib import Path

#: keys every model of the manifest has
MODEL_KEYS = ("name", "module", "expect", "timeout", "description")
#: keys of a module's entry
MODULE_KEYS = ("specification", "invariants", "properties", "constants")


def tla_value(value, substituted: bool = False) -> str:
    """A JSON value as TLA+ text: a bool TRUE/FALSE, a number, a list a set, a string a TLA+
    string, or (``substituted``) the name of the definition that replaces the constant."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "{" + ", ".join(tla_value(v) for v in value) + "}"
    if isinstance(value, str):
        return value if substituted else json.dumps(value)
    raise ValueError(f"no TLA+ value for {value!r}")


def resolve(data: dict, where: str = "spec/models.json") -> None:
    """Give each model of ``data`` its whole configuration, ``config``: module, specification,
    invariants, properties (space separated) and constants ({name: TLA+ text}, in the module's
    order). ValueError on a model whose module, ``like`` or constant is unknown."""
    modules = data.get("modules", {})
    for mod, entry in modules.items():
        missing = [k for k in MODULE_KEYS if k not in entry]
        if missing:
            raise ValueError(f"{where}: module {mod!r} lacks {missing}")
    done: dict[str, dict] = {}
    for m in data["models"]:
        base = modules.get(m["module"])
        if base is None:
            raise ValueError(f"{where}: model {m['name']}: module {m['module']!r} is not in 'modules'")
        if "like" in m:
            parent = done.get(m["like"])
            if parent is None or parent["module"] != m["module"]:
                raise ValueError(f"{where}: model {m['name']}: like {m['like']!r} is no earlier model of {m['module']}")
            cfg = {k: (dict(v) if isinstance(v, dict) else v) for k, v in parent.items()}
        else:
            cfg = {"module": m["module"], "specification": base["specification"], "invariants": base["invariants"],
                   "properties": base["properties"], "values": dict(base["constants"])}
        unknown = sorted(set(m.get("constants", {})) - set(base["constants"]))
        if unknown:
            raise ValueError(f"{where}: model {m['name']}: {unknown} are no constants of {m['module']} (its 'constants')")
        cfg["values"].update(m.get("constants", {}))
        for key in ("invariants", "properties"):
            if key in m:
                cfg[key] = m[key]
        done[m["name"]] = cfg
        subs = set(base.get("substituted", ()))
        m["config"] = dict((k, v) for k, v in cfg.items() if k != "values")
        m["config"]["constants"] = {k: tla_value(v, k in subs) for k, v in cfg["values"].items()}
        m["config"]["substituted"] = sorted(subs)


#: the results a model may expect (TLC's exit statuses by name)
EXPECTABLE = {"ok", "safety", "liveness", "deadlock", "assumption", "assert"}


def spec_dir(explicit: Path | str | None = None) -> Path:
    """``explicit``, else the spec shipped with the lab (FileNotFoundError, naming the fix, if
    the installation lacks it)."""
    if explicit is not None:
        return Path(explicit)
    from .. import _bundled

    return _bundled.path("spec")


def load_manifest(path: Path | str) -> dict:
    """spec/models.json at ``path``, checked for the keys every model needs, each model's
    configuration resolved (:func:`resolve`: ``model["config"]``)."""
    with open(path) as f:
        data = json.load(f)
    names = set()
    for m in data["models"]:
        for key in MODEL_KEYS:
            if key not in m:
                raise ValueError(f"{path}: model {m.get('name')!r} lacks {key!r}")
        if m["expect"] not in EXPECTABLE and m["expect"] != "?":
            raise ValueError(f"{path}: model {m['name']}: bad expect {m['expect']!r}")
        if m["name"] in names:
            raise ValueError(f"{path}: duplicate model {m['name']!r}")
        names.add(m["name"])
    resolve(data, str(path))
    return data


def render_cfg(model: dict, *, invariants: str | None = None, properties: str | None = None) -> str:
    """The ``.cfg`` text of a manifest model (loaded by :func:`load_manifest`): a comment with its
    name, description and expected result, its CONSTANTS, SPECIFICATION, INVARIANTS and
    PROPERTIES; ``invariants`` / ``properties`` (space separated, "" for none) replace its own."""
    cfg = model["config"]
    expect = model["expect"] + (f" ({model['violated']})" if model.get("violated") else "")
    out = [f"\\* {model['name']}: {model['description']}", f"\\* expected: {expect}",
           "\\* generated from spec/models.json (python tools/tlc.py --print-cfg NAME)", "CONSTANTS"]
    subs = set(cfg["substituted"])
    out += [f"    {k} {'<-' if k in subs else '='} {v}" for k, v in cfg["constants"].items()]
    out.append(f"SPECIFICATION {cfg['specification']}")
    invs = cfg["invariants"] if invariants is None else invariants
    props = cfg["properties"] if properties is None else properties
    if invs:
        out.append(f"INVARIANTS {invs}")
    if props:
        out.append(f"PROPERTIES {props}")
    return "\n".join(out) + "\n"


def find(data: dict, name: str) -> dict:
    """The model ``name`` of a loaded manifest (KeyError naming it otherwise)."""
    for m in data["models"]:
        if m["name"] == name:
            return m
    raise KeyError(name)


def manifest(spec: Path | str | None = None) -> dict:
    """The manifest of the spec folder ``spec`` (default: :func:`spec_dir`'s)."""
    return load_manifest(spec_dir(spec) / "models.json")


def model_constants(name: str, spec: Path | str | None = None) -> dict[str, str]:
    """{constant: TLA+ text} of the model ``name`` (``=`` and ``<-`` alike), as its ``.cfg`` assigns them."""
    return dict(find(manifest(spec), name)["config"]["constants"])


def model_cfg(name: str, spec: Path | str | None = None, **kw) -> str:
    """The ``.cfg`` text of the model ``name`` (``kw``: :func:`render_cfg`'s replacements)."""
    return render_cfg(find(manifest(spec), name), **kw)


def dump_manifest(data: dict) -> str:
    """The manifest's JSON as spec/models.json writes it: one key a line, a model's constants on
    its line, a module's one a line (``tools/tlc.py --record`` keeps the layout). Drops the
    resolved ``config``."""
    def fmt(v, ind: str, expand: int) -> str:
        if isinstance(v, list) and v and isinstance(v[0], dict):
            inner = ",\n".join(ind + "  " + fmt(x, ind + "  ", expand - 1) for x in v)
            return "[\n" + inner + "\n" + ind + "]"
        if isinstance(v, dict) and expand > 0 and v:
            inner = ",\n".join(f"{ind}  {json.dumps(k)}: {fmt(x, ind + '  ', expand - 1)}"
                               for k, x in v.items() if k != "config")
            return "{\n" + inner + "\n" + ind + "}"
        return json.dumps(v)
    top = {k: v for k, v in data.items()}
    parts = []
    for k, v in top.items():
        depth = 3 if k == "modules" else 2  # a module's constants one a line; a model's on one line
        parts.append(f"  {json.dumps(k)}: {fmt(v, '  ', depth)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"
