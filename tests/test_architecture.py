"""docs/architecture.md tells the truth about the package, and the package keeps its layers.

Checked here, on the source (no import of the package needed):

- every module and subpackage is in the doc's module table, and every row names one that exists;
- the import graph, counting *every* import (module level, inside functions, under
  `TYPE_CHECKING`), has no loop of any length;
- each layer imports only from the layers below it (`ALLOWED`: the arrows of the doc's
  picture), and the cost layer never reaches the catalog;
- no name is re-exported inside the package (only `simulator/__init__.py`, the public API,
  gathers names from elsewhere): an import is always from the module that defines the name;
- no module outside `cli/` writes a file or prints;
- the doc's "where each change goes" table names the modules where the registries live.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "simulator"
DOC = (ROOT / "docs" / "architecture.md").read_text()

#: the layers, bottom up; a module's layer is its subpackage (top-level modules: `root`)
LAYERS = ("specs", "cost", "workloads", "serving", "metrics", "profiles", "root", "analysis", "cli")

#: layer -> the layers it may import from (besides itself): the arrows of docs/architecture.md
ALLOWED: dict[str, set[str]] = {
    "specs": set(),
    "cost": {"specs"},
    "workloads": {"specs"},
    "serving": {"specs", "cost", "workloads"},
    "metrics": {"specs", "cost", "serving"},
    "profiles": {"specs", "cost", "serving"},
    "root": {"specs", "cost", "workloads", "serving", "metrics", "profiles"},
    "analysis": {"specs", "cost", "workloads", "serving", "metrics", "profiles", "root"},
    "cli": {"specs", "cost", "workloads", "serving", "metrics", "profiles", "root", "analysis"},
}

#: module-level exceptions to the layer rule: none; and modules a layer must never import
FORBIDDEN = {"cost": {"simulator.specs.catalog"}}


# --------------------------------------------------------------------------- the source as data


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(pkg: Path = PKG) -> dict[str, Path]:
    return {module_name(p, pkg.parent): p for p in sorted(pkg.rglob("*.py")) if "__pycache__" not in p.parts}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) <= 2:
        return "public" if len(parts) == 1 else "root"
    return parts[1]


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: Path, module: str, modules: set[str]) -> set[str]:
    """Every package module `path` imports, at any level of the file (function bodies and
    `if TYPE_CHECKING:` blocks included): `from a.b import c` counts as a.b.c when that is a
    module, else as a.b."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            src = _absolute(module, path, node)
            for alias in node.names:
                if alias.name == "__version__":
                    continue  # the package's version string, the one name every layer may read
                full = f"{src}.{alias.name}"
                found.add(full if full in modules else src)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    # string imports: importlib.import_module("simulator.x") and the public API's lazy table
    return {m for m in found if m in modules and m != module}


def import_graph(pkg: Path = PKG) -> dict[str, set[str]]:
    mods = package_modules(pkg)
    return {m: imports_of(p, m, set(mods)) for m, p in mods.items()}


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
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
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for m, deps in sorted(graph.items()):
        lm = layer_of(m)
        if lm == "public":
            continue
        for d in sorted(deps):
            ld = layer_of(d)
            if ld == "public":
                bad.append(f"{m} -> {d} (the public API is for users, not for the package)")
            elif ld != lm and ld not in ALLOWED[lm]:
                bad.append(f"{m} ({lm}) -> {d} ({ld})")
            elif d in FORBIDDEN.get(lm, ()):
                bad.append(f"{m} ({lm}) -> {d} (forbidden to the {lm} layer)")
    return bad


def _top_level_definitions(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.col_offset == 0:
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.col_offset == 0:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def reexports(pkg: Path = PKG) -> list[str]:
    """`from a import x` where module a does not define x itself (it imported it), inside the
    package; and `__all__` entries a module does not define."""
    mods = package_modules(pkg)
    trees = {m: ast.parse(p.read_text()) for m, p in mods.items()}
    defined = {m: _top_level_definitions(t) for m, t in trees.items()}
    bad = []
    for m, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                if m != pkg.name:
                    bad += [f"{m}.__all__ lists {x}, defined elsewhere" for x in ast.literal_eval(node.value)
                            if x not in defined[m]]
            if not isinstance(node, ast.ImportFrom):
                continue
            src = _absolute(m, mods[m], node)
            if src not in mods:
                continue
            for alias in node.names:
                if f"{src}.{alias.name}" in mods or alias.name in defined[src]:
                    continue
                bad.append(f"{m} imports {alias.name} from {src}, which does not define it")
    return bad


#: calls that write files or print (a method name on any object, or a plain function)
_WRITES = {"write_text", "write_bytes", "to_csv", "to_json", "to_parquet", "savefig", "savez",
           "savez_compressed", "mkdir", "mkdtemp", "unlink", "rmtree", "echo", "secho"}


def writes_or_prints(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        what = None
        if isinstance(f, ast.Name) and f.id == "print":
            what = "print"
        elif isinstance(f, ast.Name) and f.id == "open":
            modes = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
            modes += [k.value.value for k in node.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
            if any(set(str(m)) & set("wax+") for m in modes):
                what = "open for writing"
        elif isinstance(f, ast.Attribute):
            owner = ast.unparse(f.value)
            if f.attr in _WRITES:
                what = f.attr
            elif f.attr == "write" and owner.endswith(("stdout", "stderr")):
                what = f"{owner}.write"
            elif f.attr in ("dump", "save") and owner in ("json", "yaml", "pickle", "np", "numpy"):
                what = f"{owner}.{f.attr}"
            elif f.attr in ("replace", "rename") and owner == "os":
                what = f"os.{f.attr}"
        if what:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {what}")
    return found


# --------------------------------------------------------------------------- the doc


def _section(title: str) -> str:
    start = DOC.index(f"## {title}")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end if end >= 0 else None]


def _first_column(section: str) -> list[str]:
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [re.match(r"\| `([^`]+)`", row).group(1) for row in rows]  # type: ignore[union-attr]


def _doc_names() -> set[str]:
    """Every module as the doc's table names it: `specs/`, `specs/model.py`, `__init__.py`."""
    names = set()
    for p in PKG.rglob("*"):
        if "__pycache__" in p.parts:
            continue
        rel = p.relative_to(PKG).as_posix()
        if p.is_dir() and (p / "__init__.py").exists():
            names.add(rel + "/")
        elif p.suffix == ".py" and not (p.name == "__init__.py" and p.parent != PKG):
            names.add(rel)
    return names


# --------------------------------------------------------------------------- the checks


def test_every_module_is_listed_and_every_listed_module_exists() -> None:
    listed = set(_first_column(_section("Every module")))
    assert listed == _doc_names(), (
        f"missing from docs/architecture.md: {sorted(_doc_names() - listed)}; "
        f"listed but absent: {sorted(listed - _doc_names())}")


def test_every_module_belongs_to_a_layer() -> None:
    for m in package_modules():
        assert layer_of(m) in (*LAYERS, "public"), m


def test_no_import_loop_of_any_kind() -> None:
    assert loops(import_graph()) == []


def test_layers_import_only_downwards() -> None:
    assert layer_violations(import_graph()) == []


def test_no_reexports_inside_the_package() -> None:
    assert reexports() == []


def test_only_the_cli_writes_files_or_prints() -> None:
    found = [w for m, p in package_modules().items() if layer_of(m) != "cli" for w in writes_or_prints(p)]
    assert found == []


def test_each_kind_of_change_names_a_module_that_exists() -> None:
    section = _section("Where each kind of change goes")
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) >= 8
    for row in rows:
        where = row.split("|")[2]
        names = re.findall(r"`([^`]+)`", where)
        assert names, row
        for name in names:
            if "/" in name or name.endswith((".py", ".yaml", ".md")):
                assert (PKG / name).exists() or (ROOT / name).exists(), f"{name} (in: {row})"


def test_the_change_table_names_where_the_registries_live() -> None:
    """A new policy, workload, engine, router and trace format are one registry entry each;
    the table names the module that holds the registry."""
    section = _section("Where each kind of change goes")
    registries = {
        "scheduler policy": ("serving/sched/registry.py", "SCHEDULERS"),
        "synthetic workload": ("workloads/named.py", "NAMED_WORKLOADS"),
        "router": ("serving/pool.py", "ROUTERS"),
        "trace format": ("workloads/traces/__init__.py", "TRACE_FORMATS"),
    }
    for kind, (module, registry) in registries.items():
        row = next(line for line in section.splitlines() if kind in line)
        assert f"`{module}`" in row, row
        assert re.search(rf"^{registry}\b.*=", (PKG / module).read_text(), re.MULTILINE), (module, registry)


# --------------------------------------------------------------------------- the checks can fail


def _toy_package(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "simulator"
    for rel, text in files.items():
        p = pkg / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for d in [pkg, *[p for p in pkg.rglob("*") if p.is_dir()]]:
        (d / "__init__.py").touch()
    return pkg


def test_the_loop_detector_sees_a_function_level_loop(tmp_path: Path) -> None:
    pkg = _toy_package(tmp_path, {
        "serving/a.py": "from simulator.serving.b import x\n",
        "serving/b.py": "def f():\n    from simulator.serving.a import y\n",
    })
    assert loops(import_graph(pkg)) == [["simulator.serving.a", "simulator.serving.b"]]


def test_the_loop_detector_sees_a_type_checking_loop(tmp_path: Path) -> None:
    pkg = _toy_package(tmp_path, {
        "serving/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import x\n",
        "serving/b.py": "from .a import y\n",
    })
    assert loops(import_graph(pkg)) == [["simulator.serving.a", "simulator.serving.b"]]


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    pkg = _toy_package(tmp_path, {
        "cost/roofline.py": "def f():\n    from simulator.serving.replica import Replica\n",
        "serving/replica.py": "Replica = 1\n",
        "cost/memory.py": "from simulator.specs.catalog import load\n",
        "specs/catalog.py": "load = 1\n",
    })
    assert layer_violations(import_graph(pkg)) == [
        "simulator.cost.memory (cost) -> simulator.specs.catalog (forbidden to the cost layer)",
        "simulator.cost.roofline (cost) -> simulator.serving.replica (serving)"]


def test_the_reexport_check_sees_a_reexport(tmp_path: Path) -> None:
    pkg = _toy_package(tmp_path, {
        "specs/checks.py": "class SpecError(Exception): ...\n",
        "specs/model.py": "from simulator.specs.checks import SpecError\n__all__ = ['SpecError']\n",
        "cost/roofline.py": "from simulator.specs.model import SpecError\n",
    })
    assert sorted(reexports(pkg)) == [
        "simulator.cost.roofline imports SpecError from simulator.specs.model, which does not define it",
        "simulator.specs.model.__all__ lists SpecError, defined elsewhere"]


def _module(folder: Path, code: str) -> Path:
    """A module m.py holding `code`, for the scans' own tests (each scan must find what it bans)."""
    p = folder / "m.py"
    p.write_text(code)
    return p


@pytest.mark.parametrize("code", [
    "from pathlib import Path\ndef f(p):\n    Path(p).write_text('x')\n",
    "def f():\n    print('hello')\n",
    "def f(p):\n    with open(p, 'w') as fh:\n        fh.write('x')\n",
    "import click\ndef f():\n    click.echo('x')\n",
])
def test_the_write_check_sees_a_file_write(tmp_path: Path, code: str) -> None:
    assert len(writes_or_prints(_module(tmp_path, code), tmp_path)) == 1


# --------------------------------------------------------------------------- the registries, end to end


def test_a_toy_policy_and_workload_through_the_registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipes of docs/architecture.md: a policy and a workload added by one registry
    entry each (nothing else edited) serve requests through `Scenario`, the CLI's path.

    The toy policy serves one request at a time: its whole prompt in one step, then one token
    a step. Under `LinearCost` (1 s + 1 ms per token) two requests arriving together, prompts
    100 and 50 tokens, outputs 3 and 2: request 0's prefill step ends at 1.1 s (its first
    token), two decode steps of 1.001 s end it at 3.102 s; request 1's prefill ends at 4.152 s
    and its one decode step at 5.153 s."""
    from fake_costs import COST

    from simulator.scenario import Scenario
    from simulator.serving.sched import registry
    from simulator.serving.sched.interface import ReplicaView, SchedulerPolicy, StepPlan
    from simulator.serving.sched.registry import EngineConfig
    from simulator.serving.simulate import simulate
    from simulator.workloads import named
    from simulator.workloads.workload import Workload

    class OneAtATime(SchedulerPolicy):
        name = "toy-one-at-a-time"

        def next_step(self, view: ReplicaView, allow_segment: bool = True) -> StepPlan:
            plan = StepPlan()
            if view.active:
                s = view.active[0]
                plan.running.append((s, max(view.prompt[s] - view.computed[s], 1)))
            elif view.waiting:
                r = view.waiting[0]
                plan.admit.append((r, view.prompt_of(r)))
            return plan

    def two_requests(req: named.WorkloadRequest) -> Workload:
        return Workload([0.0, 0.0], [100, req.params["second_prompt"]], [3, 2], name="toy")

    monkeypatch.setitem(registry.SCHEDULERS, OneAtATime.name, OneAtATime)
    entry = named.NamedWorkload("toy-two", "two requests at t = 0", two_requests,
                                params=(named.WorkloadParam("second_prompt", 50, "the second prompt's tokens", 1),))
    monkeypatch.setitem(named.NAMED_WORKLOADS, entry.name, entry)

    sc = Scenario(workload="toy-two", scheduler="toy-one-at-a-time", engine=None)
    assert sc.workload_params == {"second_prompt": 50}
    res = simulate(COST, sc.make_workload(), EngineConfig(scheduler="toy-one-at-a-time", kv_capacity_tokens=10_000))
    assert res.first_token_s.tolist() == pytest.approx([1.1, 4.152])
    assert res.finish_s.tolist() == pytest.approx([3.102, 5.153])
    # the workload's parameter is a scenario setting, a YAML key and a flag at once
    assert Scenario.from_dict({"workload": "toy-two", "second_prompt": 7}).workload_params == {"second_prompt": 7}
    with pytest.raises(Exception, match="second_prompt: 0 must be an integer >= 1"):
        Scenario(workload="toy-two", workload_params={"second_prompt": 0})
    from simulator.cli.options import workload_param_options

    assert any(decls[0] == "--second-prompt" for decls, _ in workload_param_options())


# --------------------------------------------------------------------------- the output layer (issue 26)

#: the one module that writes to the file system (issue 26: one output layer)
OUTPUT_LAYER = "simulator.cli.outputs"

#: method or function names that create, replace or remove files, whatever their arguments
_FS_CHANGES = {"write_text", "write_bytes", "touch", "mkdir", "makedirs", "mkdtemp", "mkstemp", "NamedTemporaryFile",
               "TemporaryDirectory", "rmtree", "unlink", "rmdir", "removedirs", "symlink_to", "hardlink_to",
               "copy2", "copyfile", "copytree", "savetxt", "tofile", "to_excel", "to_pickle",
               "to_feather", "to_hdf", "to_parquet"}
#: calls that write to their first argument (or `path_or_buf`): fine into a memory buffer,
#: a file write otherwise; without one, pandas' to_csv / to_json return text
_TO_TARGET = {"to_csv", "to_json", "savefig", "save", "savez", "savez_compressed", "write_image"}
#: modules whose `open(path, mode)` / `remove` / `replace` / `rename` / `link` / `symlink` touch files
_FS_MODULES = {"os", "io", "gzip", "bz2", "lzma", "codecs", "tarfile", "zipfile", "shutil", "pathlib", "tempfile"}


def _buffers(tree: ast.AST) -> set[str]:
    """Names bound to an in-memory buffer (`buf = io.BytesIO()`): writing into them writes no file."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            f = node.value.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in ("BytesIO", "StringIO"):
                out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def _write_mode(node: ast.Call, index: int) -> bool:
    """Any string the mode argument can take (`"a" if append else "w"` included) writes."""
    exprs = [*node.args[index:index + 1], *(k.value for k in node.keywords if k.arg == "mode")]
    modes = [c.value for e in exprs for c in ast.walk(e) if isinstance(c, ast.Constant)]
    return any(isinstance(m, str) and re.fullmatch(r"[rwxabt+U]{1,4}", m) and set(m) & set("wax+") for m in modes)


def file_writes(path: Path, root: Path = ROOT) -> list[str]:
    """Every call in `path` that writes, creates, replaces or removes a file or folder."""
    tree = ast.parse(path.read_text())
    buffers = _buffers(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        owner = ast.unparse(f.value) if isinstance(f, ast.Attribute) else ""
        what = None
        if name == "open":
            # open(path, mode) and module.open(path, mode); Path.open(mode); os.open(path, flags)
            if owner == "os":
                flags = " ".join(ast.unparse(a) for a in node.args[1:2])
                if re.search(r"O_(WRONLY|RDWR|CREAT|APPEND|TRUNC)", flags):
                    what = "os.open for writing"
            elif _write_mode(node, 1 if owner in ("", *_FS_MODULES) else 0):
                what = "open for writing"
        elif name in _FS_CHANGES:
            what = name
        elif name in ("remove", "replace", "rename", "link", "symlink", "truncate", "copy", "move") \
                and owner in ("os", "shutil"):
            what = f"{owner}.{name}"
        elif name in ("dump", "safe_dump") and owner in ("json", "yaml", "pickle", "marshal", "tomllib"):
            stream = node.args[1:2] or [k.value for k in node.keywords if k.arg in ("fp", "stream", "file")]
            if owner == "json" or owner == "pickle" or stream:  # yaml.dump(obj) alone returns text
                if not (stream and isinstance(stream[0], ast.Name) and stream[0].id in buffers):
                    what = f"{owner}.{name}"
        elif name in _TO_TARGET:
            target = node.args[:1] or [k.value for k in node.keywords if k.arg in ("path_or_buf", "fname", "file")]
            if target and not (isinstance(target[0], ast.Name) and target[0].id in buffers):
                what = f"{name} to a path"
        if what:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {what}")
    return found


def test_only_the_output_layer_writes_files() -> None:
    """Issue 26: one output layer. Every file llmsim writes goes through `cli/outputs.py` (checked
    before the run, written atomically); a new command or format cannot open a file any other way."""
    found = [w for m, p in package_modules().items() if m != OUTPUT_LAYER for w in file_writes(p)]
    assert found == [], "\n".join(found)
    assert file_writes(package_modules()[OUTPUT_LAYER])  # the layer itself is seen writing


@pytest.mark.parametrize("code", [
    "from pathlib import Path\ndef f(p):\n    Path(p).write_text('x')\n",
    "def f(p):\n    with open(p, 'w') as fh:\n        fh.write('x')\n",
    "def f(p):\n    with open(p, mode='ab') as fh:\n        fh.write(b'x')\n",
    "def f(p, append):\n    return open(p, 'a' if append else 'w', encoding='utf-8')\n",
    "from pathlib import Path\ndef f(p):\n    Path(p).open('w').close()\n",
    "import os\ndef f(p):\n    os.close(os.open(p, os.O_WRONLY | os.O_CREAT))\n",
    "import gzip\ndef f(p):\n    gzip.open(p, 'wt').close()\n",
    "def f(df, p):\n    df.to_csv(p, index=False)\n",
    "def f(df, p):\n    df.to_json(path_or_buf=p)\n",
    "def f(fig, p):\n    fig.savefig(p, dpi=120)\n",
    "import json\ndef f(obj, fh):\n    json.dump(obj, fh)\n",
    "import yaml\ndef f(obj, fh):\n    yaml.safe_dump(obj, fh)\n",
    "import numpy as np\ndef f(p, a):\n    np.savez_compressed(p, a=a)\n",
    "import os\ndef f(a, b):\n    os.replace(a, b)\n",
    "import shutil\ndef f(a):\n    shutil.rmtree(a)\n",
    "import tempfile\ndef f():\n    return tempfile.mkdtemp()\n",
    "import shutil\ndef f(a, b):\n    shutil.copy(a, b)\n",
])
def test_the_output_layer_check_sees_a_write(tmp_path: Path, code: str) -> None:
    assert len(file_writes(_module(tmp_path, code), tmp_path)) == 1, code


@pytest.mark.parametrize("code", [
    "import io\ndef f(fig):\n    buf = io.BytesIO()\n    fig.savefig(buf, format='png')\n    return buf.getvalue()\n",
    "def f(df):\n    return df.to_csv(index=False)\n",
    "import yaml\ndef f(obj):\n    return yaml.safe_dump(obj)\n",
    "def f(p):\n    with open(p, 'rb') as fh:\n        return fh.read()\n",
    "from pathlib import Path\ndef f(p):\n    return Path(p).open().read()\n",
])
def test_the_output_layer_check_lets_reads_and_buffers_through(tmp_path: Path, code: str) -> None:
    assert file_writes(_module(tmp_path, code), tmp_path) == [], code


# ---------------------------------------------------------------------- the reader layer (issue 26)

#: the reader layer: the only modules that open a file for reading or run a parser on one
READER_LAYER = ("specs/checks.py", "specs/readers.py", "specs/catalog.py")
#: calls that read or parse a file: module-level functions, and methods whatever their object
READ_FUNCS = {("json", "load"), ("json", "loads"), ("yaml", "safe_load"), ("yaml", "load"), ("yaml", "full_load"),
              ("yaml", "unsafe_load"), ("csv", "reader"), ("csv", "DictReader"), ("pd", "read_csv"),
              ("pandas", "read_csv"), ("pd", "read_json"), ("pd", "read_parquet"), ("np", "load"),
              ("numpy", "load"), ("np", "loadtxt"), ("np", "genfromtxt"), ("np", "fromfile"), ("io", "open"),
              ("gzip", "open"), ("os", "open")}
READ_METHODS = {"read_text", "read_bytes"}
#: (module, call) outside the layer that may stay, each with its reason
READ_ALLOWLIST: dict[tuple[str, str], str] = {
    ("cli/pointstore.py", "json.loads"): "the output layer's own kept sweep points (points.jsonl, written and "
                                         "hashed per line by this module), read back with --resume; and its "
                                         "canonical header round-trip (no file)",
    ("cli/pointstore.py", "Path.read_text"): "the same points.jsonl, read back with --resume",
    ("cli/pointstore.py", "Path.read_bytes"): "SHA-256 digests of input files for --resume (hashed, not parsed; "
                                              "each is parsed by its own reader)",
    ("cli/report.py", "Path.read_text"): "--append-result: the output file being appended to (output layer)",
}


def _read_calls(path: Path) -> list[tuple[int, str]]:
    """(line, call) of every call in `path` that reads or parses a file: `open(...)` without a
    write mode, the functions of READ_FUNCS, `.read_text()` / `.read_bytes()`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if isinstance(fn, ast.Name) and fn.id == "open":
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            # a write mode, also when chosen by an expression ("a" if append else "w")
            modes = [m.value for m in ast.walk(mode) if isinstance(m, ast.Constant)] if mode is not None else []
            writes = bool(modes) and all(isinstance(m, str) and set(m) & set("wax") for m in modes)
            if not writes:
                out.append((node.lineno, "open"))
        elif isinstance(fn, ast.Attribute):
            if fn.attr in READ_METHODS:
                out.append((node.lineno, f"Path.{fn.attr}"))
            elif isinstance(fn.value, ast.Name) and (fn.value.id, fn.attr) in READ_FUNCS:
                out.append((node.lineno, f"{fn.value.id}.{fn.attr}"))
    return out


def test_files_are_read_only_through_the_reader_layer():
    """Issue 26, "one reader layer": no module outside `specs/checks.py`, `specs/readers.py` and
    `specs/catalog.py` opens a file for reading or parses one (open, json.load(s), yaml.load,
    csv.reader, pd.read_csv, np.load, Path.read_text / read_bytes), except READ_ALLOWLIST,
    each with its reason: a new reader cannot skip the size, depth, digit and encoding bounds."""
    offenders = []
    used = set()
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel in READER_LAYER:
            continue
        for line, call in _read_calls(path):
            if (rel, call) in READ_ALLOWLIST:
                used.add((rel, call))
            else:
                offenders.append(f"simulator/{rel}:{line}: {call}")
    assert not offenders, "read a file through simulator/specs/readers.py:\n" + "\n".join(offenders)
    assert used == set(READ_ALLOWLIST), f"stale allowlist entries: {set(READ_ALLOWLIST) - used}"


def test_the_reader_scan_finds_what_it_looks_for(tmp_path):
    """The scan is not vacuous: each kind of read it bans is found in a module that has it."""
    f = _module(tmp_path, "import json, numpy as np, pandas as pd\nfrom pathlib import Path\n"
                "a = open('x')\nb = open('x', 'rb')\nc = open('x', 'w')\nd = json.loads('1')\n"
                "e = pd.read_csv('x')\ng = np.load('x')\nh = Path('x').read_text()\n")
    assert _read_calls(f) == [(3, "open"), (4, "open"), (6, "json.loads"), (7, "pd.read_csv"), (8, "np.load"),
                              (9, "Path.read_text")]
