"""llmsim: how fast will this model serve this traffic on this hardware?

Public API (``import simulator as llmsim``; reference and examples in docs/api.md):

- catalogs: `load_model`, `load_hardware`, `model_catalog`, `hardware_catalog`,
  `import_hf_config`, `HardwareSpec`, `ModelSpec`, `SpecError`, `DTYPES`
- roofline: `make_cost_model`, `CostModel`, `Parallelism`, `DTypes`, `StepBatch`,
  `predict_static`, `prefill_step`, `decode_step`, `memory_plan`
- workloads: `make_workload`, `synthetic`, `builtin`, `read_trace`, `Workload`
- serving: `Scenario` (``Scenario(...).run()`` -> (result, summary)), `run`, `simulate`,
  `EngineConfig`, `summarize`
- load: `sweep` (``llmsim.sweep(scenario, "auto")``)
- validation: `validate` (``llmsim.validate(rows)``), `read_measurements`, `Validator`,
  `calibrate`
- planning (when installed): `plan`, `whatif`

Importing the package is cheap and has no side effects: everything but the spec/catalog
layer is imported on first use (PEP 562 module ``__getattr__``), and a module that does not
exist (yet) only fails when its name is used.

`sweep`, `validate`, `calibrate`, `plan` and `whatif` are also the names of submodules
(``from simulator import validate as V; V.read_measurements(...)`` keeps working). The package
makes those submodules callable: ``llmsim.sweep(...)`` calls ``simulator.sweep.sweep(...)``,
``llmsim.validate(...)`` calls ``simulator.validate.validate(...)``, and so on.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from .catalog import hardware_catalog, import_hf_config, load_hardware, load_model, model_catalog
from .specs import DTYPES, HardwareSpec, ModelSpec, SpecError

__version__ = "0.1.0"

#: public name -> (module, attribute) imported on first use
_LAZY: dict[str, tuple[str, str]] = {
    # roofline
    "make_cost_model": ("roofline", "make_cost_model"),
    "CostModel": ("roofline", "CostModel"),
    "Parallelism": ("roofline", "Parallelism"),
    "DTypes": ("roofline", "DTypes"),
    "StepBatch": ("roofline", "StepBatch"),
    "predict_static": ("roofline", "predict_static"),
    "prefill_step": ("roofline", "prefill_step"),
    "decode_step": ("roofline", "decode_step"),
    "memory_plan": ("roofline", "memory_plan"),
    # workloads
    "make_workload": ("api", "make_workload"),
    "synthetic": ("workload", "synthetic"),
    "builtin": ("workload", "builtin"),
    "read_trace": ("workload", "read_trace"),
    "Workload": ("workload", "Workload"),
    # serving
    "Scenario": ("scenario", "Scenario"),
    "run": ("api", "run"),
    "simulate": ("engine", "simulate"),
    "EngineConfig": ("engine", "EngineConfig"),
    "summarize": ("metrics", "summarize"),
    # validation
    "read_measurements": ("validate", "read_measurements"),
    "Validator": ("validate", "Validator"),
}
#: submodules that are also callable: llmsim.NAME(...) -> simulator.NAME.NAME(...)
_CALLABLE_MODULES = ("sweep", "validate", "calibrate", "plan", "whatif")

__all__ = [
    "DTYPES", "HardwareSpec", "ModelSpec", "SpecError", "hardware_catalog", "import_hf_config",
    "load_hardware", "load_model", "model_catalog", *_LAZY, *_CALLABLE_MODULES,
]


class _CallableModule(types.ModuleType):
    """A submodule whose call runs its function of the same name (``llmsim.sweep(...)``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = self.__name__.rpartition(".")[2]
        fn = self.__dict__.get(name)
        if not callable(fn):
            raise TypeError(f"module {self.__name__!r} has no function {name}(); "
                            f"use its functions by name (see dir(llmsim.{name}))")
        return fn(*args, **kwargs)


class _Package(types.ModuleType):
    """The package module: makes the `_CALLABLE_MODULES` submodules callable however they
    are first imported (the import system binds a submodule with setattr on its parent)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if (name in _CALLABLE_MODULES and isinstance(value, types.ModuleType)
                and type(value) is types.ModuleType):
            value.__class__ = _CallableModule
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
for _name in _CALLABLE_MODULES:  # submodules imported before this point (none, normally)
    _mod = sys.modules.get(f"{__name__}.{_name}")
    if _mod is not None:
        setattr(sys.modules[__name__], _name, _mod)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        globals()[name] = value
        return value
    if name in _CALLABLE_MODULES:
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r} "
                                 f"(simulator/{name}.py is not installed)") from None
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
