"""llmsim: how fast will this model serve this traffic on this hardware?

Public API (stable names; see docs/api.md):

- specs: `HardwareSpec`, `ModelSpec`, `load_model`, `load_hardware`, `SpecError`
- roofline: `CostModel`, `Parallelism`, `DTypes`, `predict_static`, `memory_plan`
- workload / engine / metrics: `make_workload`, `simulate`, `summarize`
"""

from .catalog import hardware_catalog, load_hardware, load_model, model_catalog
from .specs import DTYPES, HardwareSpec, ModelSpec, SpecError

__all__ = [
    "DTYPES",
    "HardwareSpec",
    "ModelSpec",
    "SpecError",
    "hardware_catalog",
    "load_hardware",
    "load_model",
    "model_catalog",
]
__version__ = "0.1.0"
