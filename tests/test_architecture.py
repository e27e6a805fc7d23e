"""The package's shape, read from the source (ast), so that it stays as DEVELOPERS.md describes it:
no import cycles, argparse only in the command-line modules, every module in the layout table,
no function of logic over 60 lines."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nmt"
# the only modules that may import argparse: the front end, each layer's command-line module
# (``command.py``) and the command modules beside their concepts (``<concept>_command.py``)
COMMAND_LINE = {"nmt.cli"}


def is_command_line(module: str) -> bool:
    """nmt.cli, a package's ``command`` module or a ``<concept>_command`` module."""
    last = module.rsplit(".", 1)[-1]
    return module in COMMAND_LINE or last == "command" or (last.endswith("_command") and last != "_command")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> tuple[set[str], bool]:
    """The nmt modules ``name`` imports (at any level: a lazy import is an edge too), and whether it
    imports argparse."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    edges, uses_argparse = set(), False
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [
                f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module
                for alias in node.names
            ]
        for target in targets:
            uses_argparse |= target == "argparse"
            if target in known and target != name:
                edges.add(target)
    return edges, uses_argparse


def graph() -> tuple[dict[str, set[str]], set[str]]:
    known = modules()
    edges, argparse_users = {}, set()
    for name, path in known.items():
        edges[name], uses = imports(name, path, set(known))
        if uses:
            argparse_users.add(name)
    return edges, argparse_users


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), and self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_cycle_and_nothing_else():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_nmt_has_no_import_cycles():
    assert cycles(graph()[0]) == []


def test_command_line_modules_are_cli_command_and_concept_command():
    accepted = ["nmt.cli", "nmt.serve.command", "nmt.data.command", "nmt.infer.tune_command"]
    refused = [
        "nmt.infer.tune",
        "nmt.infer.commands",
        "nmt.infer.command_line",
        "nmt.infer._command",
        "nmt.options",
        "nmt.serve.options",
    ]
    assert [m for m in accepted + refused if is_command_line(m)] == accepted


def test_only_the_command_line_modules_import_argparse():
    _, users = graph()
    allowed = {m for m in users if is_command_line(m)}
    assert users - allowed == set(), (
        "argparse outside nmt/cli.py and the */command.py, */*_command.py modules"
    )


def test_developers_layout_table_lists_every_module():
    text = (ROOT / "DEVELOPERS.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    missing = []
    for name, path in modules().items():
        rel = path.relative_to(ROOT).as_posix()
        if path.name in ("__init__.py", "__main__.py"):
            continue
        folder = rel.rsplit("/", 1)[0] + "/"
        listed = any(rel in row or (f"`{path.name}`" in row and folder in row) for row in rows)
        if not listed:
            missing.append(rel)
    assert missing == [], f"DEVELOPERS.md's layout table does not list {missing}"


# a function of logic reads as one idea: at most this many lines (``ruff format``ed, docstring included)
MAX_FUNCTION_LINES = 60
# argparse declarations (a flat list of add_argument calls) are exempt from the limit
DECLARATION_CALLS = 10


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(name, lines) of the functions in ``source`` longer than ``limit`` lines, but for argparse
    declarations (``DECLARATION_CALLS`` or more ``add_argument`` calls)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        lines = node.end_lineno - node.lineno + 1
        declarations = sum(
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "add_argument"
            for call in ast.walk(node)
        )
        if lines > limit and declarations < DECLARATION_CALLS:
            found.append((node.name, lines))
    return found


def test_long_function_finder_skips_argparse_declarations():
    body = "\n".join(f"    x{i} = {i}" for i in range(70))
    options = "\n".join(f"    p.add_argument('--o{i}')" for i in range(70))
    source = f"def logic():\n{body}\n\ndef options(p):\n{options}\n\ndef short():\n    return 1\n"
    assert long_functions(source) == [("logic", 71)]


def test_no_function_of_logic_is_longer_than_the_limit():
    found = [
        f"{name}:{function} ({lines} lines)"
        for name, path in modules().items()
        for function, lines in long_functions(path.read_text(encoding="utf-8"))
    ]
    assert found == [], f"split these into named steps (tests/test_architecture.py): {found}"


# a function takes at most this many parameters (self/cls aside; a ``*args``/``**kwargs`` catch-all is
# not counted, as pylint's too-many-arguments): values that travel together are one dataclass
MAX_PARAMETERS = 8


def wide_functions(source: str, limit: int = MAX_PARAMETERS) -> list[tuple[str, int]]:
    """(Class.name or name, parameters) of the functions in ``source`` with more than ``limit``
    named parameters, but for argparse declarations (``DECLARATION_CALLS`` or more ``add_argument``
    calls)."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = child.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
                if names[:1] in (["self"], ["cls"]):
                    names = names[1:]
                declarations = sum(
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "add_argument"
                    for call in ast.walk(child)
                )
                if len(names) > limit and declarations < DECLARATION_CALLS:
                    found.append((f"{prefix}{child.name}", len(names)))
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_wide_function_finder_counts_named_parameters_but_self_and_argparse_declarations():
    nine = ", ".join(f"p{i}" for i in range(9))
    options = "\n".join(f"    p.add_argument('--o{i}')" for i in range(10))
    source = (
        f"def wide(a, /, b, *c, {', '.join(f'k{i}' for i in range(7))}, **d):\n    pass\n\n"
        f"class C:\n    def method(self, {', '.join(f'p{i}' for i in range(8))}):\n"
        f"        def inner({nine}):\n            pass\n\n"
        f"    @classmethod\n    def make(cls, {', '.join(f'p{i}' for i in range(8))}):\n        pass\n\n"
        f"def options(p, {nine}):\n{options}\n"
    )
    assert wide_functions(source) == [("wide", 9), ("C.method.inner", 9)]


def test_no_function_takes_more_than_the_limit_of_parameters():
    found = [
        f"{name}:{function} ({count})"
        for name, path in modules().items()
        for function, count in wide_functions(path.read_text(encoding="utf-8"))
    ]
    assert found == [], (
        f"group the values that travel together into a dataclass (tests/test_architecture.py): {found}"
    )


# the history of a behaviour is git's: code and tests say what they pin, not which report asked for it
HISTORY = re.compile(r"\b(?:issue|defect)s? #?\d+", re.IGNORECASE)


def history_references(text: str) -> list[tuple[int, str]]:
    """(line number, line) of each line of ``text`` naming an issue or a defect by number."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), start=1) if HISTORY.search(line)]


def test_history_finder_finds_numbered_issues_and_defects_only():
    numbered = [f"# see {word} {n}" for word, n in (("issue", 42), ("Defects", 9), ("ISSUE", "#7"))]
    text = "\n".join([*numbered, "# an issue with 4 tokens", "# defective 3", "tissue 5"])
    assert [n for n, _ in history_references(text)] == [1, 2, 3]


def test_no_issue_or_defect_numbers_in_the_code_and_tests():
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line}"
        for folder in (PACKAGE, ROOT / "tests")
        for path in sorted(folder.rglob("*.py"))
        for n, line in history_references(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "say what is pinned, not which issue asked for it (git keeps that):\n" + "\n".join(
        found
    )


# every module has a test file of its name that tests it: tests/test_<stem>.py, or, where modules share a
# stem (nmt/data/command.py, nmt/infer/command.py), tests/test_<package>_<stem>.py, its path under nmt/
# joined by "_" (tests/test_infer_command.py); or it is listed in TESTED_ELSEWHERE with the test files that
# test it. A file tests its module when it imports it (itself, or through a tests/*_fixtures.py helper it
# imports), runs one of its `nmt` commands, requests one of its HTTP routes, or holds the string that
# TESTED_THROUGH gives as the module's door (modules_without_tests). No size threshold: an
# empty test file passed a check by name alone, and a module just under a threshold escaped it.
TESTED_ELSEWHERE: dict[str, str] = {
    "nmt/attention.py": "attention (section 3.2) inside the model: tests/test_model.py, tests/test_packed.py",
    "nmt/config_file.py": "--config files under the overrides: tests/test_config.py",
    "nmt/data/binarize.py": "the id files of a prepared directory: with the pipeline, tests/test_prepare.py",
    "nmt/data/command.py": "`nmt prepare`'s arguments: tests/test_prepare.py, tests/test_bad_inputs.py",
    "nmt/dropout.py": "16-bit dropout masks in the model's training path: tests/test_model.py",
    "nmt/experiments/parsing.py": "nmt prepare ptb, nmt parse end to end: tests/test_experiments_command.py",
    "nmt/explicit_attention.py": "the CPU bf16 attention against the fused kernel: tests/test_model.py",
    "nmt/fused_projections.py": "q/k/v as one product, with the packed layers: tests/test_packed.py",
    "nmt/infer/beam_rows.py": "what beam search keeps per hypothesis: tests/test_search.py",
    "nmt/infer/plot_attention.py": "the figures of `nmt plot-attention`: tests/test_attention_maps.py",
    "nmt/infer/plot_attention_command.py": "`nmt plot-attention`: tests/test_attention_maps.py",
    "nmt/infer/quantize.py": "int8 linear layers against float32: tests/test_decoding_modes.py",
    "nmt/realtext/command.py": "nmt translate's real-text options: tests/test_job.py",
    "nmt/infer/results.py": "a leaf of dataclasses; TranslateError a UserError: tests/test_errors.py",
    "nmt/infer/shortlist_command.py": "`nmt shortlist`, with the shortlists: tests/test_shortlist.py",
    "nmt/infer/text.py": "text in and out of the engines: tests/test_job.py",
    "nmt/infer/topk.py": "the n best extensions of each beam: tests/test_search.py",
    "nmt/languages.py": "language names: tests/test_libretranslate.py, tests/test_argos.py",
    "nmt/parameter_counts.py": "parameters per component: tests/test_model.py",
    "nmt/serve/app.py": "the app the serve tests build and request: tests/test_routes.py",
    "nmt/serve/errors.py": "the JSON errors and LibreTranslate's statuses: tests/test_libretranslate.py",
    "nmt/serve/prometheus.py": "/metrics: tests/test_routes.py",
    "nmt/serve/schemas.py": "request bodies read and refused field by field: tests/test_serve_validation.py",
    "nmt/serve/server.py": "uvicorn and signals, a served process: tests/test_serve_command.py",
    "nmt/serve/state.py": "the limits the routes check: tests/test_routes.py",
    "nmt/serve/waiting.py": "a request queued, answered, timed out or gone: tests/test_batcher.py",
    "nmt/train/distill_command.py": "`nmt distill`'s stages, with distill.py: tests/test_distill.py",
    "nmt/train/plot_command.py": "`nmt plot`: tests/test_plot.py",
    "nmt/train/run_log.py": "the logs of the runs of tests/test_trainer.py, tests/test_train_chaos.py",
    "nmt/vocab.py": "the special ids and load_spm, with the prepared data: tests/test_prepare.py",
}
# the string (or name) in a test file's code by which it reaches a module it does not import and whose
# command or routes it does not name, and why that goes through the module
TESTED_THROUGH: dict[str, tuple[str, str]] = {
    "nmt/experiments/parsing.py": ("parse", "`nmt parse` parses with it"),
    "nmt/export/argos.py": ("argos", "`nmt export argos` writes the package with it"),
    "nmt/infer/engine_ctranslate2.py": (
        "ctranslate2",
        "engine='ctranslate2' and --engine ctranslate2 load it",
    ),
    "nmt/infer/plot_attention.py": ("plot-attention", "`nmt plot-attention` draws with it"),
    "nmt/realtext/command.py": ("--format", "it declares nmt translate's --format"),
    "nmt/languages.py": ("German", "the names of LibreTranslate's /languages and of an Argos package"),
    "nmt/serve/connections.py": ("--max-connections", "it counts the requests --max-connections limits"),
    "nmt/serve/prometheus.py": ("/metrics", "it writes the text of /metrics"),
    "nmt/serve/real_text.py": ("/translate", "POST /translate plans and finishes its texts with it"),
    "nmt/serve/schemas.py": ("/translate", "POST /translate reads its body into them"),
    "nmt/serve/state.py": ("Limits", "it defines Limits (which nmt.serve.app re-exports)"),
    "nmt/serve/validation.py": ("/translate", "POST /translate reads and checks its body with it"),
    "nmt/serve/waiting.py": ("/translate", "POST /translate queues and waits with it"),
    "nmt/train/average.py": ("average", "`nmt average` averages with it"),
    "nmt/train/run_data.py": ("train", "`nmt train` reads its data with it"),
    "nmt/train/run_log.py": ("metrics.jsonl", "it writes a run's metrics.jsonl"),
}


def accepted_test_files(paths: list[str]) -> dict[str, set[str]]:
    """The names of the test files that may test each module of ``paths`` (relative to the repository,
    "nmt/infer/command.py"): ``test_<path under nmt joined by _>.py`` always, ``test_<stem>.py`` where no
    other module has the stem."""
    stems = [Path(p).stem for p in paths]
    names = {}
    for path, stem in zip(paths, stems):
        qualified = "_".join(Path(path).with_suffix("").parts[1:])
        names[path] = {f"test_{qualified}.py"} | ({f"test_{stem}.py"} if stems.count(stem) == 1 else set())
    return names


def ambiguous_test_files(paths: list[str], tests: list[str]) -> list[str]:
    """The test files of ``tests`` named after a stem that several modules of ``paths`` share, none of them
    by its path (tests/test_validation.py beside nmt/serve/validation.py and nmt/train/validation.py)."""
    names = accepted_test_files(paths)
    accepted = set().union(*names.values())
    shared = {Path(p).stem for p in paths if [Path(q).stem for q in paths].count(Path(p).stem) > 1}
    return sorted(
        t for t in tests if t not in accepted and t.removeprefix("test_").removesuffix(".py") in shared
    )


def test_test_file_names_qualify_a_shared_stem_only():
    paths = [
        "nmt/errors.py",
        "nmt/serve/errors.py",
        "nmt/infer/command.py",
        "nmt/data/command.py",
        "nmt/model.py",
    ]
    assert accepted_test_files(paths) == {
        "nmt/errors.py": {"test_errors.py"},
        "nmt/serve/errors.py": {"test_serve_errors.py"},
        "nmt/infer/command.py": {"test_infer_command.py"},
        "nmt/data/command.py": {"test_data_command.py"},
        "nmt/model.py": {"test_model.py"},
    }
    tests = ["test_command.py", "test_errors.py", "test_infer_command.py", "test_model.py", "test_recipes.py"]
    assert ambiguous_test_files(paths, tests) == ["test_command.py"]


def module_files() -> dict[str, int]:
    """Each module of nmt/ (relative path) and its number of lines, the package files aside."""
    return {
        path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in modules().values()
        if path.name not in ("__init__.py", "__main__.py")
    }


def imported_names(source: str) -> set[str]:
    """The dotted names ``source`` imports at any level: ``import a.b``, ``from a import b`` (a and a.b)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def imports_of_test_file(path: Path) -> set[str]:
    """What the test file ``path`` imports, itself or through the helpers of tests/ it imports."""
    names = imported_names(path.read_text(encoding="utf-8"))
    for name in list(names):
        helper = path.parent / f"{name.split('.')[0]}.py"
        if "." not in name and helper.is_file() and helper != path:
            names |= imported_names(helper.read_text(encoding="utf-8"))
    return names


def identifiers(source: str) -> set[str]:
    """The names ``source`` uses: variables, attributes and what it imports."""
    tree = ast.parse(source)
    return (
        {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        | {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    )


def string_constants(source: str) -> set[str]:
    """Every string in the code of ``source`` (the parts of f-strings too), docstrings and comments aside."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    }


def command_modules() -> dict[str, set[str]]:
    """The `nmt` commands of each module (relative path), read from nmt/cli.py's commands(): a tuple
    ("name", alias.add_..., ...) with the alias imported there; the commands of cli.py itself."""
    tree = ast.parse((PACKAGE / "cli.py").read_text(encoding="utf-8"))
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "commands")
    aliases = {}
    for node in ast.walk(func):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"nmt/{node.module}/{alias.name}.py"
    out: dict[str, set[str]] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Tuple) and len(node.elts) == 3 and isinstance(node.elts[0], ast.Constant):
            add = node.elts[1]
            owner = isinstance(add, ast.Attribute) and isinstance(add.value, ast.Name)
            path = aliases[add.value.id] if owner else "nmt/cli.py"
            out.setdefault(path, set()).add(node.elts[0].value)
    return out


def route_paths(source: str) -> set[str]:
    """The HTTP paths of the routes ``source`` declares (``@router.post("/translate")``)."""
    return {
        decorator.args[0].value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for decorator in node.decorator_list
        if isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and decorator.func.attr in ("get", "post", "put", "delete", "patch")
        and decorator.args
        and isinstance(decorator.args[0], ast.Constant)
    }


def reaches_module(test: Path, module: str, commands: set[str]) -> bool:
    """Whether the test file ``test`` tests the module ``module`` (relative path) of ``commands``."""
    if module.removesuffix(".py").replace("/", ".") in imports_of_test_file(test):
        return True
    source = test.read_text(encoding="utf-8")
    strings = string_constants(source)
    if module in TESTED_THROUGH and TESTED_THROUGH[module][0] in strings | identifiers(source):
        return True
    return bool(strings & (commands | route_paths((ROOT / module).read_text(encoding="utf-8"))))


def modules_without_tests(files: list[str]) -> list[str]:
    """A line for each module of ``files`` without a test file of its name that tests it, or listed
    in TESTED_ELSEWHERE with a test file that is gone or does not test it."""
    tests = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    names, commands, missing = accepted_test_files(files), command_modules(), []
    for path in files:
        named = re.findall(r"\btest_\w+\.py\b", TESTED_ELSEWHERE.get(path, ""))
        candidates = sorted(named or names[path] & tests)
        bad = [
            t
            for t in candidates
            if t not in tests or not reaches_module(ROOT / "tests" / t, path, commands.get(path, set()))
        ]
        if not candidates:
            missing.append(f"{path}: no tests/{' or tests/'.join(sorted(names[path]))}")
        elif bad:
            missing.append(f"{path}: {', '.join(bad)} missing or not testing it")
    return missing


def test_a_test_file_tests_its_module_only_when_it_imports_it_runs_its_command_or_requests_its_route(
    tmp_path,
):
    """The finder behind the check below: an empty file, or one that imports only other modules,
    does not test nmt/infer/command.py; an import, a helper's import, `nmt translate` or a door does."""
    (tmp_path / "door_fixtures.py").write_text("def cli():\n    from nmt.infer import command\n")
    cases = {
        "": False,
        "from nmt.infer.translate import Translator\nTranslator.load('x')\n": False,
        '"""Tests of translate."""\n# main(["translate"])\n': False,
        "from nmt.infer.command import run_translate\n": True,
        "import nmt.infer.command\n": True,
        "from nmt.infer import command\n": True,
        "from door_fixtures import cli\n": True,
        'main(["translate", "x"])\n': True,
    }
    for source, tests in cases.items():
        (tmp_path / "test_infer_command.py").write_text(source)
        assert (
            reaches_module(tmp_path / "test_infer_command.py", "nmt/infer/command.py", {"translate"}) is tests
        ), source
    routes = route_paths((ROOT / "nmt/serve/routes.py").read_text(encoding="utf-8"))
    assert {"/translate", "/health", "/models"} <= routes
    assert command_modules()["nmt/infer/command.py"] == {"translate"}
    assert {"prepare-ptb", "parse", "variations"} == command_modules()["nmt/experiments/command.py"]


def test_every_module_has_a_test_file_of_its_name_that_tests_it_or_a_reason():
    files = module_files()
    missing = modules_without_tests(sorted(files))
    assert missing == [], (
        "move the tests of these modules into a file of their name that tests them, or list them in "
        "TESTED_ELSEWHERE (tests/test_architecture.py) with the test files that do:\n" + "\n".join(missing)
    )
    tests = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    names = accepted_test_files(sorted(files))
    stale = [p for p in TESTED_ELSEWHERE if p not in files or names[p] & tests]
    assert stale == [], f"TESTED_ELSEWHERE lists modules that are gone or have their test file: {stale}"
    stale = [p for p in TESTED_THROUGH if p not in files]
    assert stale == [], f"TESTED_THROUGH lists modules that are gone: {stale}"


def test_no_test_file_is_named_after_a_stem_several_modules_share():
    tests = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    assert ambiguous_test_files(sorted(module_files()), tests) == [], (
        "name it test_<package>_<stem>.py after the module it tests"
    )


# a speed figure in a comment or a docstring of nmt/ ("1.5x faster", "2-3x the GFLOP/s", "12% of a step",
# "1.9 ms against 5.6 ms") names the benchmark that measured it, benchmarks/<file>.py, in the same paragraph
SPEED_FIGURE = re.compile(
    r"\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?\s?x\b(?!\s*\d)(?=[^.;]*\b(?:faster|slower|speed|GFLOP|throughput)\b)"
    r"|\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?\s?x\s+(?:faster|slower|the)\b"
    r"|\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?\s?%\s+(?:faster|slower|more|less|fewer)\b"
    r"|\d+(?:\.\d+)?\s?%\s+of\s+(?:a|the|each)\b[^.;]*\b(?:step|update|decode|run)"
    r"|\b\d+(?:\.\d+)?\s?(?:ms|µs|ns)\s+(?:against|vs\.?|per)\b|->\s*\d+(?:\.\d+)?\s?(?:ms|µs|ns)\b"
    r"|\b(?:faster|slower|speeds?\s+up)\b[^.;]*\bby\s+~?\d"
    r"|\b\d+(?:\.\d+)?\s?times\s+(?:faster|slower)",
    re.IGNORECASE,
)
BENCHMARK = re.compile(r"benchmarks/[\w/.-]+\.(?:py|sh)")


def prose_paragraphs(source: str) -> list[tuple[int, str]]:
    """(first line, text) of each paragraph of the comments and docstrings of ``source``: a run of
    comment lines on consecutive lines, or a docstring's lines between blank lines."""
    import io
    import tokenize

    paragraphs: list[tuple[int, str]] = []
    last = -2
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        row = token.start[0]
        if row == last + 1 and paragraphs and token.line.lstrip().startswith("#"):
            paragraphs[-1] = (paragraphs[-1][0], paragraphs[-1][1] + "\n" + token.string)
        else:
            paragraphs.append((row, token.string))
        last = row if token.line.lstrip().startswith("#") else -2  # a comment after code stands alone
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    row = body[0].lineno
                    for part in re.split(r"\n\s*\n", body[0].value.value):
                        paragraphs.append((row, part))
                        row += part.count("\n") + 2
    return sorted(paragraphs)


def unbenchmarked_speed_figures(source: str) -> list[tuple[int, str]]:
    """(line, figure) of each speed figure in a comment or docstring paragraph of ``source`` that names
    no benchmarks/ file."""
    return [
        (row, figure.group(0))
        for row, text in prose_paragraphs(source)
        if not BENCHMARK.search(text)
        for figure in SPEED_FIGURE.finditer(text)
    ]


def test_speed_figure_finder_wants_a_benchmark_in_the_same_paragraph():
    source = (
        '"""Packed layers run at 2-3x the GFLOP/s of F.linear.\n\nMeasured: benchmarks/a.py."""\n'
        "x = 1  # ~1.25x faster steps on CPU\n"
        "# fused: about 3x faster than the composite loss, and masks\n"
        "# take 1.9 ms against 5.6 ms (benchmarks/train_speed.py)\n"
        "# a 25 x 25 score matrix of 4% padding; the worker waits 10 ms for a batch\n"
        "def f():\n    '''Bernoulli draws are 12% of a bf16 recipe step, masks 2.9 -> 1.1 ms.'''\n"
    )
    assert unbenchmarked_speed_figures(source) == [
        (1, "2-3x"),
        (4, "1.25x"),
        (9, "12% of a bf16 recipe step"),
        (9, "-> 1.1 ms"),
    ]


def test_every_speed_figure_in_nmt_names_its_benchmark():
    found, missing = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        found += [
            f"{path.relative_to(ROOT)}:{row}: {figure}" for row, figure in unbenchmarked_speed_figures(source)
        ]
        missing += [
            f"{path.relative_to(ROOT)}: {name}"
            for name in BENCHMARK.findall(source)
            if not (ROOT / name).exists()
        ]
    assert found == [], "name the benchmarks/ script that measured it, or drop the figure:\n" + "\n".join(
        found
    )
    assert missing == [], f"benchmarks named that do not exist: {missing}"


def stale_paths(text: str, root: Path = ROOT) -> list[str]:
    """The nmt/ files ``text`` names (nmt/x.py, or `x.py` in a table row of a folder `nmt/y/`) that do
    not exist under ``root``."""
    named = set(re.findall(r"\bnmt/[\w/]+\.py\b", text))
    for row in text.splitlines():
        for folder in re.findall(r"`(nmt/[\w/]+/)`", row):
            named |= {folder + name for name in re.findall(r"`([\w]+\.py)`", row)}
    return sorted(p for p in named if not (root / p).exists())


def undefined_names(text: str, root: Path = ROOT) -> list[str]:
    """The `names` of ``text`` said to be "in [nmt/x.py]" that the file's source never mentions."""
    found = []
    for line in text.splitlines():
        for segment in re.finditer(r"((?:`[^`]+`[^`\[]*?)+?)\bin \[(nmt/[\w/]+\.py)\]", line):
            path = root / segment.group(2)
            source = path.read_text(encoding="utf-8") if path.exists() else ""
            for name in re.findall(r"`([^`]+)`", segment.group(1)):
                words = re.findall(r"[A-Za-z_]\w*", name.split(":")[0])
                found += [f"{segment.group(2)}: {name}" for w in words if not re.search(rf"\b{w}\b", source)][
                    :1
                ]
    return found


def test_layout_finders_catch_a_gone_module_and_a_gone_name(tmp_path):
    (tmp_path / "nmt" / "serve").mkdir(parents=True)
    (tmp_path / "nmt" / "model.py").write_text("class Encoder:\n    norm_position = 'post'\n")
    (tmp_path / "nmt" / "serve" / "app.py").write_text("")
    table = "| `nmt/model.py`, `nmt/gone.py` | x |\n| `nmt/serve/` | `app.py` (app), `old.py` (gone) |\n"
    assert stale_paths(table, tmp_path) == ["nmt/gone.py", "nmt/serve/old.py"]
    row = "| 3.1 | x | `Encoder`, `Decoder` in [nmt/model.py](../nmt/model.py) (`norm_position: pre`) |"
    assert undefined_names(row, tmp_path) == ["nmt/model.py: Decoder"]


def test_developers_md_and_the_model_page_name_modules_and_names_that_exist():
    for doc in ("DEVELOPERS.md", "docs/model.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        assert stale_paths(text) == [], f"{doc} names modules that are gone"
        assert undefined_names(text) == [], f"{doc} names what these modules do not define"
