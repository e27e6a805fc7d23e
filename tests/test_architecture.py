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


# a module over this many lines has a test file of its name: tests/test_<stem>.py, or, where modules share
# a stem (nmt/data/command.py, nmt/infer/command.py), tests/test_<package>_<stem>.py, its path under nmt/
# joined by "_" (tests/test_infer_command.py); or it is listed in TESTED_ELSEWHERE with the reason
LARGE_MODULE_LINES = 150
TESTED_ELSEWHERE: dict[str, str] = {
    "nmt/data/binarize.py": "the id files of a prepared directory: with the pipeline, tests/test_prepare.py",
    "nmt/data/command.py": "`nmt prepare`'s arguments: tests/test_prepare.py, tests/test_bad_inputs.py",
    "nmt/experiments/parsing.py": "nmt prepare ptb, nmt parse end to end: tests/test_experiments_command.py",
    "nmt/infer/text.py": "text in and out of the engines: tests/test_translate.py, test_infer_real_text.py",
    "nmt/train/distill_command.py": "`nmt distill`'s stages, with distill.py: tests/test_distill.py",
    "nmt/train/run_log.py": "the run's logs, through the runs of tests/test_trainer.py, test_train_chaos.py",
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


def test_every_large_module_has_a_test_file_of_its_name_or_a_reason():
    files = module_files()
    tests = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    names = accepted_test_files(sorted(files))
    untested = [
        f"{path} ({lines} lines): tests/{' or tests/'.join(sorted(names[path]))}"
        for path, lines in sorted(files.items())
        if lines > LARGE_MODULE_LINES and not names[path] & tests and path not in TESTED_ELSEWHERE
    ]
    assert untested == [], (
        "move the tests of these modules into a file of their name, or list them in TESTED_ELSEWHERE "
        "(tests/test_architecture.py) with the reason:\n" + "\n".join(untested)
    )
    stale = [p for p in TESTED_ELSEWHERE if p not in files or names[p] & tests]
    assert stale == [], f"TESTED_ELSEWHERE lists modules that are gone or have their test file: {stale}"


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
