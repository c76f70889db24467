"""Fill the ```console blocks of docs/*.md with the real output of their `$ llmsim ...` lines.

    python docs/render_commands.py docs/commands.md [more.md ...]

Each `$ llmsim ...` line is run through the CLI (in a temporary directory holding copies of
tests/data, notebooks/data, docs/examples, hardware_specs and model_specs, as
tests/test_docs.py does, commands of one file in order) and the lines after it, up to the
next `$` line or the end of the block, are replaced by what it printed (stdout and stderr).
A `# exit N` comment documents a non-zero exit status (the script checks it). Outputs longer than
MAX_LINES lines are cut there.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPIES = ("tests/data", "notebooks/data", "docs/examples", "hardware_specs", "model_specs")
MAX_LINES = 60


def run(line: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from simulator.cli.commands import main

    args = shlex.split(line, comments=True)[1:]
    r = CliRunner().invoke(main, args)
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.output


def render(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    out: list[str] = []
    in_console = False
    skipping = False
    for raw in text.splitlines():
        if raw.startswith("```"):
            if in_console:
                in_console = False
                skipping = False
            elif raw.strip() == "```console":
                in_console = True
            out.append(raw)
            continue
        if in_console and raw.startswith("$ "):
            skipping = True
            out.append(raw)
            line = raw[2:].strip()
            m = re.search(r"#\s*exit\s+(\d+)\s*$", line)
            code, printed = run(line)
            want = int(m.group(1)) if m else 0
            if code != want:
                raise SystemExit(f"{path.name}: `{line}` exited {code}, documented {want}:\n{printed}")
            lines = printed.rstrip("\n").splitlines()
            if len(lines) > MAX_LINES:
                lines = lines[:MAX_LINES] + ["... (output trimmed)"]
            out.extend(lines)
            continue
        if in_console and skipping:
            continue
        out.append(raw)
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    print(f"rendered {path}")


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or [ROOT / "docs" / "commands.md"]
    with tempfile.TemporaryDirectory() as tmp:
        for rel in COPIES:
            shutil.copytree(ROOT / rel, Path(tmp) / rel)
        old = os.getcwd()
        os.chdir(tmp)
        try:
            for p in paths:
                render(p)
        finally:
            os.chdir(old)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
