"""Imports run one way (STYLE.md rule 10): the package's import graph has no cycle, no library module imports
squeezebert_jax.benchmarks, no script edits sys.path, and no file is named after a standard-library module. The
package's own modules are imported at the top, where the reader sees the edges; a function-local one says why on its
line (``# lazy: ...``: it guards a heavy optional dependency).

The graph is read from the source (ast), every import counted: module-level, function-local and relative ones.
``from squeezebert_jax import x`` is an edge to the submodule ``x`` where there is one, else to the package itself.
"""

from __future__ import annotations

import ast
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "squeezebert_jax"
BENCHMARKS = f"{PACKAGE}.benchmarks"
SCRIPT_DIRS = ("train", "eval", "convert")


def python_files(root: str, top: str) -> list[str]:
    out = []
    for d, dirs, files in os.walk(os.path.join(root, top)):
        dirs[:] = sorted(x for x in dirs if not x.startswith((".", "__pycache__")))
        out += [os.path.relpath(os.path.join(d, f), root) for f in sorted(files) if f.endswith(".py")]
    return out


def module_name(relpath: str) -> str:
    parts = relpath[:-3].split(os.sep)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(root: str, relpath: str, modules: set[str]) -> set[str]:
    """The package modules ``relpath`` imports anywhere in its body."""
    name = module_name(relpath)
    package = name if relpath.endswith("__init__.py") else name.rpartition(".")[0]
    with open(os.path.join(root, relpath), encoding="utf-8") as f:
        tree = ast.parse(f.read(), relpath)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:  # `import squeezebert_jax.model.x` -> the longest module prefix
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def import_graph(root: str = ROOT) -> dict[str, set[str]]:
    files = python_files(root, PACKAGE)
    modules = {module_name(f) for f in files}
    return {module_name(f): imports_of(root, f, modules) for f in files}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), as a path a -> b -> ... -> a."""
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for comp in comps:  # the shortest way from the component's first module back to itself
        start = min(comp)
        paths = {w: [start, w] for w in sorted(graph[start]) if w in comp}
        while start not in paths:
            paths = {w: p + [w] for v, p in sorted(paths.items()) for w in sorted(graph[v]) if w in comp} | paths
        out.append(paths[start])
    return out


def core_importing_benchmarks(graph: dict[str, set[str]]) -> list[str]:
    is_bench = lambda m: m == BENCHMARKS or m.startswith(BENCHMARKS + ".")  # noqa: E731
    return sorted(f"{m} imports {', '.join(sorted(x for x in deps if is_bench(x)))}"
                  for m, deps in graph.items() if not is_bench(m) and any(is_bench(x) for x in deps))


def stdlib_named_files(root: str = ROOT) -> list[str]:
    files = [f for top in (PACKAGE, *SCRIPT_DIRS) for f in python_files(root, top)]
    return [f for f in files if os.path.basename(f)[:-3] in sys.stdlib_module_names]


def sys_path_edits(root: str = ROOT) -> list[str]:
    """``sys.path.insert/append/extend(...)``, ``sys.path[...] = ...`` and ``sys.path += ...`` in any file."""
    def is_sys_path(n):
        return (isinstance(n, ast.Attribute) and n.attr == "path" and isinstance(n.value, ast.Name)
                and n.value.id == "sys")

    out = []
    for f in (f for top in (PACKAGE, *SCRIPT_DIRS) for f in python_files(root, top)):
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), f)
        for n in ast.walk(tree):
            edit = (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and is_sys_path(n.func.value)
                    and n.func.attr in ("insert", "append", "extend"))
            edit |= isinstance(n, ast.AugAssign) and is_sys_path(n.target)
            edit |= isinstance(n, ast.Assign) and any(
                is_sys_path(t) or isinstance(t, ast.Subscript) and is_sys_path(t.value) for t in n.targets)
            if edit:
                out.append(f"{f}:{n.lineno}")
    return out


def hidden_own_imports(root: str = ROOT) -> list[str]:
    """``file:line`` of each import of the package inside a function or class (an edge the top of the file does not
    show) whose line gives no ``# lazy:`` reason."""
    out = []
    for f in (f for top in (PACKAGE, *SCRIPT_DIRS) for f in python_files(root, top)):
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            text = fh.read()
        lines, tree = text.splitlines(), ast.parse(text, f)
        for scope in ast.walk(tree):
            if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for n in ast.walk(scope):
                names = ([a.name for a in n.names] if isinstance(n, ast.Import)
                         else [n.module or ""] if isinstance(n, ast.ImportFrom) and not n.level else [])
                if any(x == PACKAGE or x.startswith(PACKAGE + ".") for x in names) \
                        and "# lazy:" not in lines[n.lineno - 1]:
                    out.append(f"{f}:{n.lineno}")
    return sorted(set(out))


# -- the rules, on this tree ------------------------------------------------------------------------------------------

def test_the_package_import_graph_has_no_cycle():
    graph = import_graph()
    assert f"{PACKAGE}.model" in graph and f"{PACKAGE}.mobile" in graph[f"{BENCHMARKS}.latency"]  # the walk sees
    assert cycles(graph) == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles(graph))


def test_no_library_module_imports_the_benchmarks():
    assert core_importing_benchmarks(import_graph()) == []


def test_no_file_is_named_after_a_standard_module():
    assert stdlib_named_files() == []


def test_no_script_edits_sys_path():
    assert sys_path_edits() == []


def test_the_package_is_imported_at_the_top_unless_a_line_says_why():
    assert hidden_own_imports() == []


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for w in graph.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def test_file_helpers_and_text_data_modules_need_no_model():
    """The file helpers are a leaf; the GLUE, tokenizer and corpus code reach neither the model, its loading and
    conversion, nor the trainer (so they run where flax is not wanted)."""
    graph = import_graph()
    assert graph[f"{PACKAGE}.files"] <= {f"{PACKAGE}.errors"}
    heavy = {f"{PACKAGE}.{m}" for m in ("model", "pretrained", "convert", "trainer", "pretrain", "finetune")}
    for m in ("glue", "tokenizer", "corpus"):
        assert not reachable(graph, f"{PACKAGE}.{m}") & heavy, m


def test_entry_modules_are_not_used_as_libraries():
    """pretrain and finetune are the trainers' drivers: only what drives or compiles them imports them (sweep runs
    fine-tunings; aot compiles the very step a run uses; benchmarks time it)."""
    graph = import_graph()
    drivers = {f"{PACKAGE}.sweep", f"{PACKAGE}.aot"}
    for entry in ("pretrain", "finetune"):
        users = {m for m, deps in graph.items() if f"{PACKAGE}.{entry}" in deps}
        assert {u for u in users if u not in drivers and not u.startswith(BENCHMARKS)} == set(), entry


# -- the checks themselves, on small made-up trees --------------------------------------------------------------------

def write_tree(root, files: dict[str, str]) -> str:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(root)


def test_the_checks_see_function_local_relative_and_from_package_imports(tmp_path):
    """The shape of the old tree: mobile reached bench through a function-local import, bench imported mobile."""
    root = write_tree(tmp_path, {
        f"{PACKAGE}/__init__.py": "from squeezebert_jax.model import M\n",
        f"{PACKAGE}/model.py": "import os\n",
        f"{PACKAGE}/mobile.py": "def latency():\n    from squeezebert_jax.benchmarks.timing import t\n",
        f"{PACKAGE}/benchmarks/__init__.py": "",
        f"{PACKAGE}/benchmarks/timing.py": "from .. import mobile\nfrom . import other\n",
        f"{PACKAGE}/benchmarks/other.py": "from squeezebert_jax import model\n",
        f"{PACKAGE}/profile.py": "",
        "eval/x.py": "import sys\nsys.path.insert(0, '..')\n",
        "train/y.py": "import sys\nsys.path[:0] = ['..']\n",
    })
    graph = import_graph(root)
    assert graph[f"{PACKAGE}.mobile"] == {f"{BENCHMARKS}.timing"}
    assert graph[f"{BENCHMARKS}.timing"] == {f"{PACKAGE}.mobile", f"{BENCHMARKS}.other"}
    assert graph[f"{BENCHMARKS}.other"] == {f"{PACKAGE}.model"}
    assert cycles(graph) == [[f"{BENCHMARKS}.timing", f"{PACKAGE}.mobile", f"{BENCHMARKS}.timing"]]
    assert core_importing_benchmarks(graph) == [f"{PACKAGE}.mobile imports {BENCHMARKS}.timing"]
    assert stdlib_named_files(root) == [os.path.join(PACKAGE, "profile.py")]
    assert sorted(sys_path_edits(root)) == [os.path.join("eval", "x.py") + ":2", os.path.join("train", "y.py") + ":2"]
    assert hidden_own_imports(root) == [os.path.join(PACKAGE, "mobile.py") + ":2"]
