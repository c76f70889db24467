"""llmsim: how fast will this model serve this traffic on this hardware?

Public API (``import simulator as llmsim``; reference and examples in docs/api.md):

- catalogs: `load_model`, `load_hardware`, `model_catalog`, `hardware_catalog`,
  `import_hf_config`, `HardwareSpec`, `ModelSpec`, `SpecError`, `DTYPES`
- roofline: `make_cost_model`, `CostModel`, `Parallelism`, `DTypes`, `StepBatch`,
  `predict_static`, `prefill_step`, `decode_step`, `memory_plan`
- workloads: `make_workload`, `synthetic`, `builtin`, `read_trace`, `Workload`
- serving: `Scenario` (``Scenario(...).run()`` -> (result, summary)), `run`, `simulate`,
  `EngineConfig`, `summarize`
- load: `run_sweep` (``llmsim.run_sweep(scenario, "auto")``), `parse_sweep`, `make_executor`
- validation: `validate_rows` (``llmsim.validate_rows(rows)``), `read_measurements`,
  `Validator`, `calibrate_hardware`
- planning: `make_plan`, `run_whatif`

Every public name is a plain function or class, and none shares its name with a submodule:
`run_sweep` is `simulator.analysis.sweep.sweep`, `validate_rows` is `simulator.analysis.validate.validate`,
`calibrate_hardware` is `simulator.analysis.calibrate.calibrate`, `make_plan` is `simulator.analysis.plan.plan`
and `run_whatif` is `simulator.analysis.whatif.whatif`; ``from simulator import sweep`` is the module.

Importing the package is cheap and has no side effects: every name is imported on first use
(PEP 562 module ``__getattr__``).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: public name -> (module, attribute) imported on first use: `import simulator` (and so every
#: `llmsim` command, `llmsim --help` included) loads neither numpy nor YAML until a name is used
_LAZY: dict[str, tuple[str, str]] = {
    # catalogs
    "load_model": ("specs.catalog", "load_model"),
    "load_hardware": ("specs.catalog", "load_hardware"),
    "model_catalog": ("specs.catalog", "model_catalog"),
    "hardware_catalog": ("specs.catalog", "hardware_catalog"),
    "import_hf_config": ("specs.catalog", "import_hf_config"),
    "HardwareSpec": ("specs.hardware", "HardwareSpec"),
    "ModelSpec": ("specs.model", "ModelSpec"),
    "SpecError": ("specs.checks", "SpecError"),
    "DTYPES": ("specs.dtypes", "DTYPES"),
    # roofline
    "make_cost_model": ("resolve", "make_cost_model"),
    "CostModel": ("cost.roofline", "CostModel"),
    "Parallelism": ("specs.parallelism", "Parallelism"),
    "DTypes": ("specs.dtypes", "DTypes"),
    "StepBatch": ("cost.stepbatch", "StepBatch"),
    "predict_static": ("cost.predict", "predict_static"),
    "prefill_step": ("cost.stepbatch", "prefill_step"),
    "decode_step": ("cost.stepbatch", "decode_step"),
    "memory_plan": ("cost.memory", "memory_plan"),
    # workloads
    "make_workload": ("api", "make_workload"),
    "synthetic": ("workloads.workload", "synthetic"),
    "builtin": ("workloads.traces", "builtin"),
    "read_trace": ("workloads.traces", "read_trace"),
    "Workload": ("workloads.workload", "Workload"),
    # serving
    "Scenario": ("scenario", "Scenario"),
    "run": ("api", "run"),
    "simulate": ("serving.simulate", "simulate"),
    "EngineConfig": ("serving.sched.registry", "EngineConfig"),
    "summarize": ("metrics.summary", "summarize"),
    # load
    "run_sweep": ("analysis.sweep", "sweep"),
    "parse_sweep": ("analysis.sweep", "parse_sweep"),
    "make_executor": ("analysis.executors", "make_executor"),
    # validation
    "validate_rows": ("analysis.validate", "validate"),
    "read_measurements": ("analysis.measurements", "read_measurements"),
    "Validator": ("analysis.validate", "Validator"),
    "calibrate_hardware": ("analysis.calibrate", "calibrate"),
    # planning
    "make_plan": ("analysis.plan", "plan"),
    "run_whatif": ("analysis.whatif", "whatif"),
}

__all__ = [*_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
