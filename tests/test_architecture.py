"""The layering docs/architecture.md promises, checked on the code's own imports (every import statement, also
those inside functions and under TYPE_CHECKING: a lazy import is still a dependency).

    pipeline/      the core: imports none of the layers above it
    europa_model/  torchtitan components: may use pipeline's primitives, never a stage
    stages/        one package per stage (the registry's STAGE_NAMES): a stage may import another stage's record
                   (the contract between them) and the shared code directly under stages/ (modules such as
                   stages/mixture.py, packages such as stages/cluster/), nothing else of another stage; shared
                   code imports no stage
    flows/         Prefect orchestration: the top
and no two modules import each other, directly or in a loop. The stage and engine plug-ins the registry names
by string (pipeline/registry.py) are the one way down-to-up, and they are checked to exist.

And one home per file primitive: atomic writes and the sha256 of a file live in pipeline/fsutil.py; a second
implementation elsewhere fails here (test_one_home_for_atomic_writes_and_file_checksums says what counts).
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

from pipeline.config import REPO_ROOT
from pipeline.registry import STAGE_NAMES

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


def stage_of(module: str) -> str | None:
    """The stage a module belongs to; None outside stages/ and for the shared code directly under it."""
    parts = module.split(".")
    return parts[1] if parts[0] == "stages" and len(parts) > 2 and parts[1] in STAGE_NAMES else None


def test_a_stage_reads_another_stage_only_through_its_record():
    bad = []
    for m, deps in graph().items():
        for d in deps:
            own, other = stage_of(m), stage_of(d)
            if own and other and own != other and not d.endswith(".record"):
                bad.append(f"{m} -> {d}")
    assert bad == [], "stage internals imported by another stage:\n" + "\n".join(bad)


def test_shared_code_under_stages_imports_no_stage():
    shared = [m for m in graph() if m.startswith("stages.") and stage_of(m) is None and m != "stages"]
    assert "stages.cluster.slurm" in shared and "stages.mixture" in shared  # what the rule is about
    bad = [f"{m} -> {d}" for m in shared for d in graph()[m] if stage_of(d)]
    assert bad == [], "shared code under stages/ that imports a stage (it sits below the stages):\n" + "\n".join(bad)


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

    refs = [r for p in registry._PARTS.values() for r in (p.stage, p.config, p.record, p.commands, p.projection) if r]
    refs += list(registry.ENGINES.values()) + list(registry.ORCHESTRATION_COMMANDS)
    missing = [r for r in refs if importlib.util.find_spec(r.partition(":")[0]) is None]
    assert missing == []
    for name in registry.STAGE_NAMES:
        stage = registry.get_stage(name)
        assert stage.name == name
        assert stage.config_model is registry.stage_config_model(name), name  # what ctx.settings is


# --- one home per file primitive --------------------------------------------------------------------------------

PRIMITIVES = "pipeline/fsutil.py"  # atomic_write_text / _bytes, atomic_dir, sha256_file / sha256_files
SCANNED = (*LAYERS, "bench")  # tests/ may hash a file its own way: a check independent of the code it checks
# renames of a temporary that are not a second atomic write: (file, function) -> why
SWAPS = {("pipeline/rundir.py", "publish"): "the core's publish: the staged stage folder swapped in"}
TEMPORARY = re.compile(r"tmp|temp|partial|staging", re.IGNORECASE)  # how a temporary's name or its making reads


def _functions(tree: ast.Module) -> list[tuple[str, list[ast.AST]]]:
    """(name, nodes) of every function (nested ones apart from their parent) and of the module's own code."""
    out = []

    def own(body: list[ast.stmt]) -> list[ast.AST]:
        nodes, stack = [], list(body)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((node.name, own(node.body)))
                continue
            nodes.append(node)
            stack.extend(ast.iter_child_nodes(node))
        return nodes

    out.append(("<module>", own(tree.body)))
    return out


def _renames_of_temporaries(nodes: list[ast.AST]) -> list[ast.Call]:
    """os.replace / os.rename / shutil.move and Path.replace / Path.rename (one argument: str.replace takes two) from
    or to a temporary: a file or folder written aside and renamed onto its final name, or a final one moved aside
    to swap another in."""
    temporary = set()
    for node in nodes:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets, value = [node.optional_vars], node.context_expr
        for t in targets:
            if isinstance(t, ast.Name) and (TEMPORARY.search(t.id) or TEMPORARY.search(ast.unparse(value))):
                temporary.add(t.id)

    def is_temporary(expr: ast.expr) -> bool:  # it names a temporary, or a path inside one
        return any(isinstance(n, ast.Name) and n.id in temporary for n in ast.walk(expr)) \
            or bool(TEMPORARY.search(ast.unparse(expr)))

    found = []
    for node in nodes:
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        f = node.func
        if ast.unparse(f) in ("os.replace", "os.rename", "shutil.move") and len(node.args) == 2:
            source, target = node.args
        elif f.attr in ("replace", "rename") and len(node.args) == 1 and not node.keywords:
            source, target = f.value, node.args[0]
        else:
            continue
        if is_temporary(source) or is_temporary(target):
            found.append(node)
    return found


def _file_hash_loops(nodes: list[ast.AST]) -> list[ast.AST]:
    """A loop that reads a file in chunks (`.read(`) into a hash (`.update(`) in a function that makes a sha256; and
    hashlib.sha256 of a whole file read at once (`.read()` / `.read_bytes()`)."""
    calls = [n for n in nodes if isinstance(n, ast.Call)]
    makes_sha = any(ast.unparse(c.func) == "hashlib.sha256"
                    or (ast.unparse(c.func) == "hashlib.new" and c.args and ast.unparse(c.args[0]) in ("'sha256'", '"sha256"'))
                    for c in calls)
    found: list[ast.AST] = []
    if makes_sha:
        for loop in (n for n in nodes if isinstance(n, (ast.While, ast.For))):
            inner = [c for c in ast.walk(loop) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)]
            if any(c.func.attr == "read" and c.args for c in inner) and any(c.func.attr == "update" for c in inner):
                found.append(loop)
    for c in calls:
        if ast.unparse(c.func) == "hashlib.sha256" and c.args and isinstance(c.args[0], ast.Call) \
                and isinstance(c.args[0].func, ast.Attribute) and c.args[0].func.attr in ("read", "read_bytes"):
            found.append(c)
    return found


def second_homes() -> list[str]:
    out = []
    for top in SCANNED:
        for path in sorted((REPO_ROOT / top).rglob("*.py")):
            rel = path.relative_to(REPO_ROOT).as_posix()
            if rel == PRIMITIVES:
                continue
            for name, nodes in _functions(ast.parse(path.read_text(encoding="utf-8"))):
                if (rel, name) in SWAPS:
                    continue
                out += [f"{rel}:{n.lineno} {name}: an atomic write ({ast.unparse(n)}); use fsutil.atomic_write_text / "
                        f"atomic_write_bytes / atomic_dir" for n in _renames_of_temporaries(nodes)]
                out += [f"{rel}:{n.lineno} {name}: the sha256 of a file; use fsutil.sha256_file / sha256_files"
                        for n in _file_hash_loops(nodes)]
    return sorted(out)


def test_one_home_for_atomic_writes_and_file_checksums():
    """A temporary renamed onto a final name is an atomic write; a file read into a sha256 is a file checksum:
    both live in pipeline/fsutil.py. Hashes of data while it is written or built (the shard and safetensors
    writers, the checkpoint digests on the ranks, the manifest's digest of a JSON value) read no file and are
    not checksums of one; the core's publish (SWAPS) is a folder swap of its own."""
    assert second_homes() == [], "a second home of a file primitive:\n" + "\n".join(second_homes())


def test_the_primitive_rules_see_a_second_home():
    """The rule on code that has each kind (the shapes the primitives had before they had one home)."""
    code = ast.parse('''
def write(path, text):
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

def swap(work, out_dir):
    old = Path(tempfile.mkdtemp(dir=out_dir.parent))
    os.replace(out_dir, old / out_dir.name)
    work.rename(out_dir)

def publish(out_dir):
    work = out_dir.parent / f".{out_dir.name}.partial-1"
    os.replace(work, out_dir)

def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()

def whole(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()

def fine(old, new, data, text):
    os.rename(old, new)
    text.replace("a", "b")
    return hashlib.sha256(data).hexdigest()
''')
    found = {name: (len(_renames_of_temporaries(nodes)), len(_file_hash_loops(nodes))) for name, nodes in _functions(code)}
    assert found == {"<module>": (0, 0), "write": (1, 0), "swap": (1, 0), "publish": (1, 0), "sha": (0, 1),
                     "whole": (0, 1), "fine": (0, 0)}
    # and the primitives' own home, which the rules must recognise as what it is
    home = {name for name, nodes in _functions(ast.parse((REPO_ROOT / PRIMITIVES).read_text(encoding="utf-8")))
            if _renames_of_temporaries(nodes) or _file_hash_loops(nodes)}
    assert home == {"atomic_write_bytes", "atomic_dir", "sha256_file"}


HOOKS = ("unit_cost", "unit_work", "keep_work", "long_job", "launch_only_settings", "input_signature",
         "config_model")


def test_stage_settings_and_hooks_are_typed_not_cast_or_probed():
    """ctx.settings is the stage's own config type (StageContext[Cfg]) and the optional hooks are declared on the
    base classes: nothing casts the one with `# type: ignore` or probes the other with getattr."""
    cast, probed = [], []
    for name, path in modules().items():
        text = path.read_text(encoding="utf-8")
        for i, line in enumerate(text.splitlines(), 1):
            if "settings" in line and "type: ignore" in line:
                cast.append(f"{name}:{i}")
        for node in ast.walk(ast.parse(text)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in HOOKS):
                probed.append(f"{name}:{node.lineno} {node.args[1].value}")
    assert cast == [], "stage settings cast with # type: ignore:\n" + "\n".join(cast)
    assert probed == [], "stage hooks probed with getattr/hasattr:\n" + "\n".join(probed)
