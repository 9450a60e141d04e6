"""The layering docs/architecture.md promises, checked on the code's own imports (every import statement, also
those inside functions and under TYPE_CHECKING: a lazy import is still a dependency).

    pipeline/      the core: imports none of the layers above it
    europa_model/  torchtitan components: may use pipeline's primitives, never a stage
    stages/        one package per stage: a stage may import another stage's record (the contract between them)
                   and the shared modules directly under stages/, nothing else of another stage
    flows/         Prefect orchestration: the top
and no two modules import each other, directly or in a loop. The stage and engine plug-ins the registry names
by string (pipeline/registry.py) are the one way down-to-up, and they are checked to exist.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from pipeline.config import REPO_ROOT

LAYERS = ("pipeline", "europa_model", "stages", "flows")  # bottom to top


def modules() -> dict[str, Path]:
    out = {}
    for layer in LAYERS:
        for path in sorted((REPO_ROOT / layer).rglob("*.py")):
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules `path` imports (resolved to the longest known module name)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(path, name, set(mods)) for name, path in mods.items()}


def layer(module: str) -> int:
    return LAYERS.index(module.split(".")[0])


def test_layers_import_only_downward():
    upward = [f"{m} -> {d}" for m, deps in graph().items() for d in deps if layer(d) > layer(m)]
    assert upward == [], "imports that run up the layers:\n" + "\n".join(upward)


def test_a_stage_reads_another_stage_only_through_its_record():
    def stage_of(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if parts[0] == "stages" and len(parts) > 2 else None

    bad = []
    for m, deps in graph().items():
        for d in deps:
            own, other = stage_of(m), stage_of(d)
            if own and other and own != other and not d.endswith(".record"):
                bad.append(f"{m} -> {d}")
    assert bad == [], "stage internals imported by another stage:\n" + "\n".join(bad)


def test_no_import_cycles():
    g = graph()
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    assert cycles == [], f"modules that import each other: {cycles}"


def test_europa_model_holds_only_torchtitan_components():
    stray = [f"{m} -> {d}" for m, deps in graph().items() if m.startswith("europa_model") for d in deps
             if d.startswith("pipeline") and d not in ("pipeline.fsutil", "pipeline.errors")]
    assert stray == [], "europa_model uses more of the core than its file primitives:\n" + "\n".join(stray)


def test_the_registrys_plug_ins_exist():
    from pipeline import registry

    refs = [r for p in registry._PARTS.values() for r in (p.stage, p.config, p.record, p.commands) if r]
    refs += list(registry.ENGINES.values()) + list(registry.ORCHESTRATION_COMMANDS) + list(registry.JOB_LAUNCHERS.values())
    missing = [r for r in refs if importlib.util.find_spec(r.partition(":")[0]) is None]
    assert missing == []
    for name in registry.STAGE_NAMES:
        stage = registry.get_stage(name)
        assert stage.name == name
        assert stage.config_model is registry.stage_config_model(name), name  # what ctx.settings is
    for ref in registry.JOB_LAUNCHERS.values():
        launcher = registry.load(ref)
        assert all(callable(getattr(launcher, f, None)) for f in ("submit_job", "job_state", "is_finished")), ref
