"""Start-up that costs nothing (issue 24): what a command loads, checked by what it imports and
which files it parses, never by timing (speed is measured in benchmarks/bench_startup.py).

* the catalog index (ids, aliases, HF ids read from their own lines) agrees with a full parse of
  every shipped file, and with YAML on crafted files whose name lines are not in the plain forms;
* the C loader of the built-in catalog reads every shipped file as the bounded user-file loader does;
* loading one model and one accelerator parses only their two files;
* `llmsim --help` imports neither numpy, pandas, matplotlib nor YAML; a simulate run imports
  no pandas or matplotlib;
* the built-in traces read without pandas are bit for bit the ones the full reader gives.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.specs import catalog as C
from simulator.workloads import traces as T

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("kind", ["hardware_specs", "model_specs"])
def test_index_agrees_with_a_full_parse_of_every_shipped_file(kind):
    files = list(C.iter_catalog_files(kind))
    assert len(files) >= 20
    for path in files:
        full = C.read_yaml(path)
        want = {k: full[k] for k in C._NAME_KEYS if k in full}
        assert C._names_of(path) == want, path
    index = C._catalog_index(kind)
    specs = C.hardware_catalog() if kind == "hardware_specs" else C.model_catalog()
    assert list(index) == list(specs)


def test_the_catalog_loader_reads_every_file_as_the_user_file_loader():
    for kind in ("hardware_specs", "model_specs", "engine_specs"):
        for path in C.iter_catalog_files(kind):
            assert C.read_catalog_yaml(path) == C.read_yaml(path), path


@pytest.mark.parametrize("text, names", [
    ("id: x-1\naliases: [a, 'b c', \"d\"]\nhf_id: org/X-1.5\nother: 1\n",
     {"id": "x-1", "aliases": ["a", "b c", "d"], "hf_id": "org/X-1.5"}),
    # forms the line scan hands to YAML: a block list, a list with a number and a bool, a
    # multi-line flow list, a quoted id with a colon, a comment line inside a block
    ("id: x\naliases:\n  - a\n  # note\n  - b\nsize: 2\n", {"id": "x", "aliases": ["a", "b"]}),
    ("id: x\naliases: [4090, on, a]\n", {"id": "x", "aliases": [4090, True, "a"]}),
    ("id: x\naliases: [a,\n   b]\n", {"id": "x", "aliases": ["a", "b"]}),
    ("id: \"x: y\"  # quoted\nhf_id: yes\n", {"id": "x: y", "hf_id": True}),
    ("aliases:\n- a\n- b\nid: x\n", {"id": "x", "aliases": ["a", "b"]}),
    # a flow mapping at the top: the scan finds no id, the whole file is parsed
    ("{id: x, aliases: [a]}\n", {"id": "x", "aliases": ["a"]}),
])
def test_index_reads_name_lines_as_yaml_does(tmp_path, text, names):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    assert C._names_of(path) == names
    full = C.read_yaml(path)
    assert {k: full[k] for k in C._NAME_KEYS if k in full} == names


def test_one_model_and_one_accelerator_parse_two_files(monkeypatch):
    parsed: list[str] = []
    real = C.read_catalog_yaml

    def counting(path):
        parsed.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(C, "read_catalog_yaml", counting)
    # a fresh spec cache for this test (the package's own keeps its shared objects)
    monkeypatch.setattr(C, "_catalog_spec", functools.cache(C._catalog_spec.__wrapped__))
    assert C.load_model("meta-llama/Llama-3.1-70B").id == "llama-3.1-70b"
    assert C.load_hardware("NVIDIA H100 80GB HBM3").id == "h100-sxm"
    assert C.load_hardware("h100").id == "h100-sxm"
    assert sorted(parsed) == ["h100-sxm.yaml", "llama-3.1-70b.yaml"]


def test_the_catalog_and_a_single_load_share_one_object():
    assert C.load_hardware("h100-sxm") is C.hardware_catalog()["h100-sxm"]
    assert C.load_model("llama-3.1-8b") is C.model_catalog()["llama-3.1-8b"]


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sys.modules))"],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return set(out.split())


def test_help_imports_no_numeric_or_yaml_library():
    code = ("import sys, io, contextlib\nsys.argv = ['llmsim', '--help']\n"
            "from simulator.cli.commands import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main()\n    except SystemExit:\n        pass\n")
    loaded = _modules_after(code)
    assert "click" in loaded and "simulator.cli.commands" in loaded
    assert not {"numpy", "pandas", "matplotlib", "yaml"} & loaded


def test_a_simulate_run_imports_no_pandas_or_matplotlib():
    code = ("import sys, io, contextlib\n"
            "sys.argv = ['llmsim', 'simulate', '-m', 'llama-3.1-8b', '-H', 'h100-sxm', '-w', 'azure-conv',"
            " '-n', '50', '-r', '5', '-q']\n"
            "from simulator.cli.commands import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main()\n    except SystemExit:\n        pass\n")
    loaded = _modules_after(code)
    assert "simulator.serving.simulate" in loaded
    assert not {"pandas", "matplotlib"} & loaded


@pytest.mark.parametrize("name", sorted(T.BUILTIN_WORKLOADS))
def test_builtin_traces_without_pandas_are_the_full_readers(name):
    path = Path(T.__file__).parent / T.BUILTIN_WORKLOADS[name][0]
    fast, full = T._read_clean_simple(path), T.read_trace(path, fmt="simple")
    for k in ("arrival_s", "input_len", "output_len"):
        a, b = getattr(fast, k), getattr(full, k)
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8)), k
    assert (fast.name, fast.bad_rows, fast.extra) == (full.name, full.bad_rows, full.extra)


def test_a_trace_that_is_not_clean_goes_to_the_full_reader(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,2\n1.5,x,3\n")
    with pytest.raises(C.SpecError, match=r"t.csv:3: column 'num_prefill_tokens'"):
        T._read_clean_simple(path)
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n1.5,10,2\n0.5,7,3\n")
    w = T._read_clean_simple(path)
    assert w.arrival_s.tolist() == [0.0, 1.0] and w.input_len.tolist() == [7, 10]


def test_timeline_is_built_when_read():
    import simulator as llmsim

    res, _ = llmsim.Scenario(model="llama-3.1-8b", hardware="h100-sxm", workload="random", num_requests=20,
                             rate=5.0, input_len=100, output_len=10).run()
    assert isinstance(res.__dict__["_timeline"], dict)  # columns until read
    tl = res.timeline
    assert list(tl.columns)[:2] == ["time_s", "replica"] and len(tl) > 0
    assert res.timeline is tl
