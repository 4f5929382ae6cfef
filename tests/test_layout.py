"""The layout rules of docs/design.md, "Layers": checked on the source itself.

Each test reads the files under ``src/attncoda`` and names every offender, so a violation
points at the line to fix.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "attncoda"
TESTS = ROOT / "tests"
MODULES = sorted(p for p in SRC.rglob("*.py"))
MAX_LINES = 400


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_source_tree_is_found():
    assert len(MODULES) > 40
    assert (SRC / "experiments" / "contract" / "__init__.py").is_file()


def test_no_module_is_over_400_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in MODULES
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_every_layer_of_the_design_is_a_package():
    for layer in (
        "capture",
        "coda",
        "data",
        "experiments",
        "models",
        "report",
        "run",
        "store",
        "training",
    ):
        assert (SRC / layer / "__init__.py").is_file(), layer


def test_every_folder_of_the_tests_mirrors_a_package():
    """``tests/<a>/<b>/`` holds the tests of ``attncoda.<a>.<b>``: every folder under
    ``tests/`` that holds Python files (or a folder that does) is a package of the source."""
    folders = {
        folder
        for path in TESTS.rglob("*.py")
        if "__pycache__" not in path.parts
        for folder in path.relative_to(TESTS).parents
        if folder != Path(".")
    }
    assert Path("capture", "kernels") in folders
    missing = sorted(
        f"tests/{folder.as_posix()}: no src/attncoda/{folder.as_posix()}/__init__.py"
        for folder in folders
        if not (SRC / folder / "__init__.py").is_file()
    )
    assert missing == []


# A document cited for the reader (design notes, READMEs): files a run writes (manifest.json)
# are named in docstrings too, and are not citations.
_FILE_CITED = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.md)\b")


def _docstrings(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node, doc


def test_no_docstring_cites_a_file_that_is_not_in_the_repository():
    known = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if ".git" not in p.parts}
    names = {Path(k).name for k in known}
    missing = []
    for path in MODULES:
        for node, doc in _docstrings(_tree(path)):
            for cited in _FILE_CITED.findall(doc):
                if "/" in cited:
                    found = any(k.endswith(cited) for k in known)
                else:
                    found = cited in names
                if not found:
                    missing.append(
                        f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}: {cited}"
                    )
    assert missing == []


_SECTION_CITED = re.compile(r'design\.md[,:]?\s*\(?"([^"]+)"')


def test_every_section_of_docs_design_md_a_docstring_cites_exists():
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    sections = {line.lstrip("#").strip() for line in design.splitlines() if line.startswith("#")}
    cited = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in MODULES
        for _, doc in _docstrings(_tree(path))
        for name in (" ".join(found.split()) for found in _SECTION_CITED.findall(doc))
        if name not in sections
    }
    assert cited == set()


def _error_messages(tree: ast.Module):
    """The literal leading and trailing text of every ``AttncodaError(...)`` (or
    ``MissingWheelError(...)``) message."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name not in ("AttncodaError", "MissingWheelError"):
            continue
        parts = _string_parts(node.args[0])
        if parts:
            yield node.lineno, parts[0], parts[-1]


def _string_parts(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        values = node.values
        first = values[0] if values else None
        last = values[-1] if values else None
        head = first.value if isinstance(first, ast.Constant) else ""
        tail = last.value if isinstance(last, ast.Constant) else ""
        return [str(head), str(tail)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _string_parts(node.left), _string_parts(node.right)
        if left and right:
            return [left[0], right[-1]]
    return []


# A message may open with a name that is spelled with a capital (a class, a model family, an
# acronym): the first word then has a capital after its first letter, or is a known name.
_PROPER = re.compile(r"^([A-Z][a-z]*[A-Z0-9]|[A-Z]{2,}|GPT|Ray|Gemma|Hugging|PyTorch|Parquet)")


def test_error_messages_are_lowercase_without_a_final_full_stop():
    bad = []
    for path in MODULES:
        for line, head, tail in _error_messages(_tree(path)):
            where = f"{path.relative_to(ROOT)}:{line}"
            if head[:1].isupper() and not _PROPER.match(head):
                bad.append(f"{where}: starts with a capital: {head[:40]!r}")
            if tail.rstrip().endswith(".") and not tail.rstrip().endswith(("...", "e.g.", "i.e.")):
                bad.append(f"{where}: ends with a full stop: {tail[-40:]!r}")
    assert bad == []


def _is_module(name: str) -> bool:
    path = SRC.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_no_module_imports_a_private_name_of_another_module():
    bad = []
    for path in MODULES:
        here = _module_name(path)
        package = here if path.name == "__init__.py" else here.rpartition(".")[0]
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            if not source.startswith("attncoda"):
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                # A package's private module (attncoda.coda._math) serves its siblings.
                sibling = source == package and _is_module(f"{source}.{alias.name}")
                if private and source != here and not sibling:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {source}.{alias.name}")
    assert bad == []


def test_the_layer_contract_holds():
    """import-linter (the dev extra) checks pyproject's contract: dependencies point down."""
    exe = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(exe), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_the_layer_contract_refuses_an_import_of_the_top_package(tmp_path):
    """The top package imports (lazily) every layer, so a module that imports it runs back
    up: the contract covers the root package too. A copy of the source with one such
    import breaks it, naming the module."""
    src = tmp_path / "src"
    shutil.copytree(
        ROOT / "src" / "attncoda",
        src / "attncoda",
        ignore=shutil.ignore_patterns("*.pyc", "__pycache__", "assets", "reference"),
    )
    module = src / "attncoda" / "experiments" / "predictor" / "_fit.py"
    text = module.read_text(encoding="utf-8")
    module.write_text(text.replace("from attncoda._version import", "from attncoda import"))
    exe = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(exe), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout[-2000:]
    assert "The top package stands above every layer" in done.stdout
    assert "attncoda.experiments.predictor._fit -> attncoda (l." in done.stdout


def _imports(path: Path) -> set[str]:
    """The attncoda modules ``path`` imports anywhere in it (at the top, inside a function,
    under ``TYPE_CHECKING``): ``from pkg import name`` is ``pkg.name`` when that is a
    module, else ``pkg``."""
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name.startswith("attncoda") and not _is_module(name):
                    name = name.rpartition(".")[0]
                if name.startswith("attncoda"):
                    found.add(name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            if not source.startswith("attncoda"):
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.add(sub if _is_module(sub) else source)
    found.discard(here)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle_of_three_and_a_pair():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b", "c"], ["d", "e"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_a_module_that_imports_it_back():
    """No cycle of imports between modules, however long and wherever the imports sit
    (a lazy import inside a function or one under ``TYPE_CHECKING`` still ties two modules:
    give what both need a module of its own)."""
    graph = {_module_name(p): _imports(p) for p in MODULES}
    assert graph["attncoda.experiments.safety._experiment"] >= {"attncoda.experiments.flips"}
    assert _cycles(graph) == []


def _code_strings(tree: ast.Module) -> list[tuple[int, str]]:
    """Every string constant of ``tree`` but its docstrings, with its line."""
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


def test_the_report_the_cli_and_the_api_name_no_experiment():
    """docs/design.md, "Layers": they iterate the registry. A string that is an experiment's
    name (or its command's, with dashes), or an import of one experiment's package, is an
    if-chain or a table waiting to happen."""
    from attncoda.experiments.contract import EXPERIMENTS

    names = set(EXPERIMENTS) | {n.replace("_", "-") for n in EXPERIMENTS}
    found = []
    for layer in ("report", "cli", "api"):
        for path in sorted((SRC / layer).rglob("*.py")):
            tree = _tree(path)
            where = str(path.relative_to(ROOT))
            for line, text in _code_strings(tree):
                words = set(re.findall(r"[a-z][a-z_-]*", text))
                if text in names or (len(text.split()) <= 3 and words & names):
                    found.append(f"{where}:{line}: {text!r}")
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module:
                    parts = node.module.split(".")
                    if parts[:2] == ["attncoda", "experiments"] and len(parts) > 2:
                        if parts[2] in EXPERIMENTS:
                            found.append(f"{where}:{node.lineno}: from {node.module}")
    assert found == []


MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 6


def _signature_text(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    return "\n".join(lines[node.lineno - 1 : node.body[0].lineno - 1])


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the ``def`` to the function's last, its docstring excluded."""
    length = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        if isinstance(first.value.value, str):
            length -= first.end_lineno - first.lineno + 1
    return length


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    named = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
    return len(named) + (a.vararg is not None) + (a.kwarg is not None)


def long_functions(path: Path) -> list[str]:
    """The functions of one module over 60 lines or 6 parameters whose signature states no
    reason (``# long: why`` or ``# params: why``), as ``path:line: name (n lines, n params)``."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        signature = _signature_text(lines, node)
        length, params = _body_lines(node), _parameters(node)
        if (length > MAX_FUNCTION_LINES and "# long:" not in signature) or (
            params > MAX_PARAMETERS and "# params:" not in signature
        ):
            found.append(f"{path}:{node.lineno}: {node.name} ({length} lines, {params} params)")
    return found


def test_no_function_is_over_60_lines_or_6_parameters_without_a_stated_reason():
    """docs/design.md, "Layers": a function says one thing; one that must be longer, or take
    more, says why on its ``def`` line (a Triton kernel's parameters are its launch contract)."""
    found = [hit for p in MODULES for hit in long_functions(p)]
    assert found == [], "\n".join(found)


def test_the_function_checker_finds_a_long_function_and_a_wide_one(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    source = (
        f"def tall():\n    '''doc\n    more'''\n{body}\n"
        "def wide(a, b, c, d, e, f, g):\n    pass\n"
        "def excused(a, b, c, d, e, f, g):  # params: a launch contract\n    pass\n"
        f"def fits():\n    '''doc'''\n" + "\n".join(f"    y{i} = {i}" for i in range(59)) + "\n"
    )
    path = tmp_path / "m.py"
    path.write_text(source)
    assert [hit.split(": ")[1] for hit in long_functions(path)] == [
        "tall (62 lines, 0 params)",
        "wide (2 lines, 7 params)",
    ]


def test_module_level_constants_in_run_are_immutable():
    """docs/design.md, "Layers": no process state in ``run/``; a loaded model travels in a
    ``Loaded`` object. A module-level name bound to a list, dict, set or a call that makes
    one is mutable state waiting to be written (``__all__`` aside: it names the module's API)."""
    mutable = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
    makers = {"list", "dict", "set", "defaultdict", "OrderedDict", "Counter", "deque"}
    found = []
    for path in sorted((SRC / "run").rglob("*.py")):
        for node in _tree(path).body:
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            value = node.value
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if [getattr(t, "id", None) for t in targets] == ["__all__"]:
                continue
            call = value.func if isinstance(value, ast.Call) else None
            name = getattr(call, "id", getattr(call, "attr", None))
            if isinstance(value, mutable) or name in makers:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
