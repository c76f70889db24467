"""Coverage-guided fuzzing of llmsim's file readers with atheris (optional; not a test).

The test suite's fuzzers are hypothesis-based and bounded (tests/test_reliability.py);
this harness runs open-ended, coverage-guided fuzzing of the same contract: any input file
gives a valid result or one SpecError line, never another exception.

    pip install atheris
    python benchmarks/fuzz_atheris.py -runs=100000           # all targets
    python benchmarks/fuzz_atheris.py -max_total_time=600 corpus_dir/

Targets (chosen by the first input byte): a trace file (simple/azure/burstgpt CSV, Mooncake
JSONL, auto-detected), a Hugging Face config.json, a model YAML, a hardware YAML and a
scenario YAML (`llmsim simulate -c`, fields validated but not run).
"""

from __future__ import annotations

import os
import sys
import tempfile

import atheris

with atheris.instrument_imports():
    from simulator.scenario import Scenario
    from simulator.specs.catalog import import_hf_config, load_hardware, load_model
    from simulator.specs.catalog import read_yaml as _read_yaml
    from simulator.specs.checks import SpecError
    from simulator.workloads.traces import read_trace

_DIR = tempfile.mkdtemp(prefix="llmsim-fuzz-")
_SEEDS = [
    b"arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,2\n1.5,20,3\n",
    b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n",
    b"Timestamp,Model,Request tokens,Response tokens\n0,ChatGPT,10,0\n1,GPT-4,5,3\n",
    b'{"timestamp": 0, "input_length": 5, "output_length": 3, "hash_ids": [1]}\n',
]


def _scenario(path: str) -> None:
    Scenario.from_dict(_read_yaml(path), path)


_TARGETS = [
    (".csv", lambda p: read_trace(p)),
    (".csv", lambda p: read_trace(p, skip_bad_rows=True)),
    (".jsonl", lambda p: read_trace(p)),
    (".json", import_hf_config),
    (".yaml", load_model),
    (".yaml", load_hardware),
    (".yaml", _scenario),
]


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    t = fdp.ConsumeIntInRange(0, len(_TARGETS) - 1)
    seed = _SEEDS[fdp.ConsumeIntInRange(0, len(_SEEDS) - 1)] if fdp.ConsumeBool() else b""
    body = seed + fdp.ConsumeBytes(fdp.remaining_bytes())
    ext, fn = _TARGETS[t]
    path = os.path.join(_DIR, f"input{ext}")
    with open(path, "wb") as f:
        f.write(body)
    try:
        fn(path)
    except SpecError as e:
        if "\n" in str(e):
            raise AssertionError(f"multi-line SpecError: {e!r}") from None


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
