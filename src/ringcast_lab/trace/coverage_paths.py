"""From a TLC model to behaviours: :func:`dump_graph` runs TLC on a manifest model with ``-dump
dot`` and reads its state graph (:mod:`.coverage`); :func:`covering_paths` computes behaviours
from the initial state that together take every transition (or enter every state), which the
stateful harness replays on the real processes (tests/stateful/guided.py)."""

from __future__ import annotations

import collections
import json
import os
import tempfile
from pathlib import Path

from .coverage import Graph, build_graph, read_dot

def shortest_tree(graph: Graph) -> dict:
    """BFS from the initial states: {state: (parent, edge) or None}."""
    succ = collections.defaultdict(list)
    for e in graph.edges:
        succ[e[0]].append(e)
    tree = {k: None for k in graph.init}
    todo = collections.deque(graph.init)
    while todo:
        k = todo.popleft()
        for e in succ[k]:
            if e[1] not in tree:
                tree[e[1]] = e
                todo.append(e[1])
    return tree


def path_to(tree: dict, k: int) -> list:
    out = []
    while tree[k] is not None:
        out.append(tree[k])
        k = tree[k][0]
    return out[::-1]


def covering_paths(graph: Graph, done=(), only_states: bool = False) -> list[list]:
    """Behaviours from the initial state that together take every transition not in ``done``
    (or, with ``only_states``, enter every state): for each uncovered edge, in BFS order, a
    shortest path to its source, the edge, then on along uncovered edges while there are any."""
    tree = shortest_tree(graph)
    succ = collections.defaultdict(list)
    for e in graph.edges:
        succ[e[0]].append(e)
    covered = set(done)
    reached = {e[1] for e in done} | set(graph.init)
    depth = {k: len(path_to(tree, k)) for k in tree}
    todo = sorted(graph.edges, key=lambda e: (depth.get(e[0], 1 << 30), e))
    paths = []
    for e in todo:
        if e in covered or (only_states and e[1] in reached):
            continue
        path = path_to(tree, e[0]) + [e]
        k = e[1]
        while True:
            nxt = [f for f in succ[k] if f not in covered and f not in path and not (only_states and f[1] in reached)]
            if not nxt:
                break
            path.append(nxt[0])
            k = nxt[0][1]
        covered.update(path)
        reached.update(f[1] for f in path)
        paths.append(path)
    return paths


# ------------------------------------------------------------------------------------ TLC runs --
def dump_graph(name: str, *, spec=None, java=None, jar=None, timeout: float = 600, cache: bool = True, q=None,
               tag: str = "", build=None) -> Graph:
    """Run TLC on manifest model ``name`` (no temporal properties) with ``-dump dot`` and read
    its state graph (``q``: the quotient, :func:`ringcast_lab.trace.coverage.build_graph`; ``tag``
    names it in the cache; ``build``: replaces :func:`ringcast_lab.trace.coverage.build_graph`, called
    without ``q``); cached by the spec's and cfg's contents and the tag
    (``~/.cache/ringcast/coverage``)."""
    import hashlib

    from ..tlc import run as tlc
    from ..tlc.find import find_jar, find_java

    spec = tlc.spec_dir(spec)
    model = tlc.select(tlc.load_manifest(spec / "models.json")["models"], [name])[0]
    cfg_text = tlc.render_cfg(model, properties="")
    h = hashlib.sha256(cfg_text.encode() + b"".join(p.read_bytes() for p in sorted(spec.glob("*.tla")))).hexdigest()[:16]
    cdir = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ringcast" / "coverage"
    cpath = cdir / f"{name}{tag and '-' + tag}-{h}.json"
    if cache and cpath.is_file():
        return Graph.from_json(json.loads(cpath.read_text()))
    jar = jar or find_jar(None)[0]
    java = java or find_java(None)[0]
    consts = dict(model["config"]["constants"])
    with tempfile.TemporaryDirectory(prefix="ringcast-cov-") as tmp:
        cfg = Path(tmp) / f"{name}.cfg"
        cfg.write_text(cfg_text)
        dot = Path(tmp) / "graph.dot"
        os.makedirs(Path(tmp) / "java")
        cmd = tlc.tlc_prefix(java, jar, 1, str(Path(tmp) / "states"), str(Path(tmp) / "java")) + tlc.FINGERPRINT
        cmd += ["-dump", "dot,actionlabels", str(dot), "-config", str(cfg), model["module"]]
        res = tlc.run_tlc(cmd, spec, timeout)
        if not res.no_error:
            raise RuntimeError(f"TLC on {name} did not finish cleanly ({res.result}): {res.errors or res.output[-2000:]}")
        nodes, edges, init = read_dot(dot.read_text())
    if build is not None:
        g = build(name, {**consts, "_model": name}, nodes, edges, init)
    else:
        g = build_graph(name, {**consts, "_model": name}, nodes, edges, init, q=q)
    g.constants["_distinct"] = len(nodes)
    if cache:
        cdir.mkdir(parents=True, exist_ok=True)
        cpath.write_text(json.dumps(g.to_json()))
    return g
