"""Every `llmsim ...` command shown in README.md and docs/*.md runs.

The test extracts the fenced ```bash, ```sh, ```shell and ```console blocks of README.md
and docs/*.md and runs every line that starts with `llmsim` (in console blocks: every
`$ llmsim ...` line; a trailing backslash continues a line) through click's CliRunner on
`simulator.cli.commands.main`, with the arguments split by shlex. Rules:

* README.md's first two fenced blocks (install + main job, install + tests) are skipped: the
  newcomer check runs those as they are.
* Expected exit status: 0, or N when the command line ends with a `# exit N` comment (error
  examples).
* The commands of one file run in order in one temporary directory (a later command may read
  what an earlier one wrote, e.g. a calibration overlay). The directory holds copies of
  `tests/data`, `notebooks/data`, `docs/examples`, `hardware_specs` and `model_specs`, so
  relative paths to
  those work; commands that mention `../shared/` run only when that folder exists next to the
  repository (the development checkout).
* Scaling, so the whole file stays fast: a command that accepts `--num-requests` gets
  `--num-requests 50` appended when it asks for more than 50 requests or relies on the
  default (click keeps the last value, so this caps `-n 2000`); a command that accepts
  `--serial` gets it (no process pool: same results, no spawn cost) unless it names
  `--workers` or `--dask`. Docs should need no other scaling: keep their commands fast.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from simulator.cli.commands import main

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_SKIP_BLOCKS = 2
NUM_REQUESTS_CAP = 50
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
_SHELL = {"bash", "sh", "shell", "console"}


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]


def commands_in(path: Path) -> list[tuple[str, int]]:
    """(command line, expected exit code) of every llmsim command in the file's shell blocks."""
    blocks = [b for b in fenced_blocks(path.read_text(encoding="utf-8")) if b[0] in _SHELL]
    if path.name == "README.md":
        blocks = blocks[README_SKIP_BLOCKS:]
    out = []
    for lang, body in blocks:
        lines: list[str] = []
        for raw in body.replace("\\\n", " ").splitlines():
            line = raw.strip()
            if lang == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:].strip()
            lines.append(line)
        for line in lines:
            if not line.startswith("llmsim ") and line != "llmsim":
                continue
            expected = 0
            m = re.search(r"\s#\s*exit\s+(\d+)\s*$", line)
            if m:
                expected = int(m.group(1))
            out.append((line, expected))
    return out


def _command(args: list[str]) -> click.Command | None:
    cmd: click.Command = main
    for a in args:
        if isinstance(cmd, click.Group) and a in cmd.commands:
            cmd = cmd.commands[a]
        else:
            break
    return None if isinstance(cmd, click.Group) else cmd


def scaled(args: list[str]) -> list[str]:
    """The scaling rule of the module docstring."""
    cmd = _command(args)
    if cmd is None:
        return args
    names = {p.name for p in cmd.params}
    args = list(args)
    if "num_requests" in names:
        asked = None
        for i, a in enumerate(args):
            if a in ("-n", "--num-requests") and i + 1 < len(args):
                asked = int(args[i + 1])
            elif a.startswith("--num-requests="):
                asked = int(a.split("=", 1)[1])
        if asked is None or asked > NUM_REQUESTS_CAP:
            args += ["--num-requests", str(NUM_REQUESTS_CAP)]
    if "serial" in names and not any(a in ("--workers", "--dask", "--serial") for a in args):
        args.append("--serial")
    return args


def _cases() -> list:
    cases = []
    for path in DOC_FILES:
        cmds = commands_in(path)
        if cmds:
            cases.append(pytest.param(path, cmds, id=path.relative_to(ROOT).as_posix()))
    return cases


def test_docs_have_commands():
    names = {p.name for p in DOC_FILES}
    assert {"commands.md", "api.md", "concepts.md", "formats.md", "limits.md", "calibration.md"} <= names
    shown = {shlex.split(c)[1] for p in DOC_FILES for c, _ in commands_in(p) if len(shlex.split(c)) > 1}
    # every command of the CLI appears in the docs with an example
    assert set(main.commands) <= shown, set(main.commands) - shown


def test_scaling_rule():
    assert scaled(["simulate", "-n", "2000"])[-2:] == ["--num-requests", "50"]
    assert scaled(["simulate", "-n", "20"]) == ["simulate", "-n", "20"]
    assert scaled(["sweep"])[-3:] == ["--num-requests", "50", "--serial"]
    assert scaled(["sweep", "--workers", "2", "-n", "10"]) == ["sweep", "--workers", "2", "-n", "10"]
    assert scaled(["models"]) == ["models"]


@pytest.mark.parametrize("path,cmds", _cases())
def test_doc_commands_run(path: Path, cmds: list[tuple[str, int]], tmp_path: Path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    for rel in ("tests/data", "notebooks/data", "docs/examples", "hardware_specs", "model_specs"):
        if (ROOT / rel).is_dir():
            shutil.copytree(ROOT / rel, work / rel)
    if SHARED.is_dir():
        (tmp_path / "shared").symlink_to(SHARED, target_is_directory=True)
    monkeypatch.chdir(work)
    runner = CliRunner()
    ran = 0
    for line, expected in cmds:
        if "../shared/" in line and not SHARED.is_dir():
            continue
        args = scaled(shlex.split(line, comments=True)[1:])
        result = runner.invoke(main, args, catch_exceptions=True)
        detail = f"{path.name}: `{line}` -> exit {result.exit_code} (expected {expected})\n{result.output[-3000:]}"
        if result.exception and not isinstance(result.exception, SystemExit):
            raise AssertionError(detail) from result.exception
        assert result.exit_code == expected, detail
        ran += 1
    assert ran or not cmds


def test_api_example_runs(monkeypatch, tmp_path):
    """The runnable example of docs/api.md runs outside the repository (issue 16)."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    m = re.search(r"## A runnable example\n\n```python\n(.*?)^```", text, re.S | re.M)
    assert m, "docs/api.md has no runnable example"
    monkeypatch.chdir(tmp_path)
    exec(compile(m.group(1), "docs/api.md", "exec"), {"__name__": "docs_api_example"})


def test_public_api():
    import types

    import simulator as llmsim

    for name in llmsim.__all__:
        value = getattr(llmsim, name)
        assert value is not None and not isinstance(value, types.ModuleType), name
    from simulator.analysis import sweep as sw
    from simulator.analysis import validate as V  # the submodule is a plain module, not callable

    assert type(V) is types.ModuleType and not callable(V) and not callable(sw)
    assert llmsim.validate_rows is V.validate and llmsim.run_sweep is sw.sweep
    from simulator.analysis import calibrate, plan, whatif

    assert llmsim.calibrate_hardware is calibrate.calibrate
    assert llmsim.make_plan is plan.plan and llmsim.run_whatif is whatif.whatif


def test_catalog_doc_is_current():
    """docs/catalog.md is what docs/render_catalog.py writes from the YAMLs (rerun it after a
    catalog or profile change)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("render_catalog", ROOT / "docs" / "render_catalog.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (ROOT / "docs" / "catalog.md").read_text(encoding="utf-8") == mod.render()
    assert (ROOT / "docs" / "limits.md").read_text(encoding="utf-8") == mod.limits_text()
