"""The wheel carries every subpackage.

setuptools installs only the packages `pyproject.toml` names. A subpackage missing from that list
works in a checkout (and under an editable install) but is absent from `pip install .`: the
notebooks and the `llmsim` command then fail with `No module named 'simulator.analysis'`, which
is how CI met it once. The list is checked against the tree here, where a checkout can see it.
"""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _listed() -> set[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(data["tool"]["setuptools"]["packages"])


def test_every_subpackage_is_listed_for_the_wheel():
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "simulator").rglob("__init__.py")}
    missing = sorted(on_disk - _listed())
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"


def test_every_listed_package_exists():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dirs = data["tool"]["setuptools"].get("package-dir", {})
    for name in _listed():
        folder = ROOT / dirs.get(name, name.replace(".", "/"))
        assert folder.is_dir(), f"{name}: {folder} does not exist"


def test_catalog_data_ship_as_package_data():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shipped = data["tool"]["setuptools"]["package-data"]
    for name in ("simulator.hardware_specs", "simulator.model_specs", "simulator.engine_specs"):
        assert shipped.get(name) == ["*.yaml"], name
