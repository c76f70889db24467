"""Engine profiles: vLLM, TensorRT-LLM and SGLang as data (`engine_specs/`), their limit and KV-budget rules, and a profile applied to a run."""
