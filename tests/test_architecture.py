"""docs/architecture.md tells the truth about the package, and the package has no import loop."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "simulator"
DOC = (ROOT / "docs" / "architecture.md").read_text()


def _package_modules() -> set[str]:
    """Every module of the package as the doc names it: `x.py`, or `x/` for a subpackage."""
    mods = {p.name for p in PKG.glob("*.py")}
    mods |= {p.name + "/" for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    return mods


def _section(title: str) -> str:
    start = DOC.index(f"## {title}")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end if end >= 0 else None]


def _first_column(section: str) -> list[str]:
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [re.match(r"\| `([^`]+)`", row).group(1) for row in rows]  # type: ignore[union-attr]


def test_every_module_is_listed_and_every_listed_module_exists() -> None:
    listed = set(_first_column(_section("Every module")))
    assert listed == _package_modules(), (
        f"missing from docs/architecture.md: {sorted(_package_modules() - listed)}; "
        f"listed but absent: {sorted(listed - _package_modules())}")


def test_each_kind_of_change_names_a_module_that_exists() -> None:
    section = _section("Where each kind of change goes")
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) >= 6  # accelerator, model family, policy, cost effect, trace format, command
    for row in rows:
        where = row.split("|")[2]
        first = re.search(r"`([^`]+)`", where)
        assert first, row
        name = first.group(1)
        assert (PKG / name).exists() or (ROOT / name).exists(), f"{name} (in: {row})"


def _module_level_imports(path: Path, modules: set[str]) -> set[str]:
    """Sibling modules imported when `path` is loaded (function-level and TYPE_CHECKING
    imports are deferred, so they cannot form a load-time loop)."""
    out: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node) if isinstance(node, (ast.Import, ast.ImportFrom, ast.If, ast.Try)) else []:
            if isinstance(sub, ast.ImportFrom) and sub.level == 1:
                if sub.module:
                    out.add(sub.module.split(".")[0])
                else:
                    out.update(a.name for a in sub.names)
    return out & modules


def test_no_import_loop() -> None:
    files = {p.stem: p for p in PKG.glob("*.py") if p.stem != "__init__"}
    files["traces"] = PKG / "traces" / "__init__.py"
    graph = {m: _module_level_imports(p, set(files)) - {m} for m, p in files.items()}
    state: dict[str, int] = {}
    loops: list[list[str]] = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                loops.append(stack[stack.index(n):] + [m, n] if n in stack else [m, n])
            elif n not in state:
                visit(n, stack + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert not loops, f"import loops: {loops}"


def test_the_loop_detector_sees_a_loop(tmp_path: Path) -> None:
    """The detector itself can fail: two modules importing each other form a loop."""
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text("from .a import y\n")
    assert _module_level_imports(tmp_path / "a.py", {"a", "b"}) == {"b"}
    assert _module_level_imports(tmp_path / "b.py", {"a", "b"}) == {"a"}
