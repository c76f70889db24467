"""Finding specs: the built-in catalogs, user YAML files and Hugging Face config.json files.

`load_model(ref)` accepts a catalog id or alias, a YAML path, a config.json path, or a folder
holding one of those. `load_hardware(ref)` accepts a catalog id, a YAML path, or an overlay
YAML (`base: h100-sxm` plus the fields to change, as `llmsim calibrate` writes).
Every problem is raised as `SpecError` naming the file, the field and the value.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from simulator.specs.checks import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    MAX_SPEC_BYTES,
    SpecError,
    check_tree,
    is_int,
    load_json,
    read_text_bounded,
    show,
)
from simulator.specs.fields import _did_you_mean, build
from simulator.specs.hardware import HardwareSpec
from simulator.specs.model import MLASpec, ModelSpec, MoESpec, SlidingWindowSpec


class _Checks:
    """What every spec loader refuses beyond YAML itself: a key given twice (the later one would
    silently win) and integers longer than MAX_INT_DIGITS digits (Python refuses 4,300; a
    count needs fewer than 20). Mixed into the pure-Python loader of user files and the C
    loader of the built-in catalog (constructors are Python in both)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)  # type: ignore[attr-defined]
                try:
                    dup = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # unhashable: the constructor reports it
                if dup:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {show(key)}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]

    def construct_yaml_int(self, node: Any) -> Any:
        digits = sum(ch.isdigit() for ch in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"integer of {digits} digits (at most {MAX_INT_DIGITS})", node.start_mark)
        return super().construct_yaml_int(node)  # type: ignore[misc]


class _Loader(_Checks, yaml.SafeLoader):
    """SafeLoader for user files: also reads `1e12` and `2.5e-6` as floats (YAML 1.1 needs a
    dot), refuses what `_Checks` refuses and nesting deeper than MAX_DEPTH (the composer
    recurses, so the depth is bounded while composing, before any recursion limit)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


#: the built-in catalog's loader: libyaml's C parser (10x faster than the pure-Python one
#: that parsing every catalog file on every run took 0.25 s with) under the same resolver
#: and checks. The files ship with the package; user files keep the bounded `_Loader`.
_CatalogLoader: Any = (type("_CatalogLoader", (_Checks, yaml.CSafeLoader), {})
                       if getattr(yaml, "__with_libyaml__", False) else _Loader)

_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
for _cls in dict.fromkeys((_Loader, _CatalogLoader)):
    _cls.add_constructor("tag:yaml.org,2002:int", _cls.construct_yaml_int)
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file of at most MAX_SPEC_BYTES, nested at most MAX_DEPTH deep, at most
    MAX_NODES values with aliases expanded; any problem is a SpecError naming file and line."""
    return _parse_yaml(read_text_bounded(Path(path), MAX_SPEC_BYTES, "spec or scenario file"), path, _Loader)


def read_catalog_yaml(path: str | Path) -> Any:
    """A file of the built-in catalogs (hardware, models, engine profiles): as `read_yaml`, parsed
    by the C loader (`_CatalogLoader`)."""
    return _parse_yaml(read_text_bounded(Path(path), MAX_SPEC_BYTES, "catalog file"), path, _CatalogLoader)


def _parse_yaml(text: str, path: str | Path, loader: Any) -> Any:
    try:
        data = yaml.load(text, Loader=loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(f"{path}:{line}: invalid YAML: {problem}") from None
    except RecursionError:  # a guard: the composer's depth is bounded above
        raise SpecError(f"{path}: invalid YAML: nested too deeply") from None
    check_tree(data, str(path))
    return data


@functools.cache
def _catalog_dir(kind: str) -> Path:
    """Folder of the built-in catalog (`hardware_specs` or `model_specs`), installed or not."""
    try:
        # installed: the YAML files ship as data of simulator.<kind> (a namespace package,
        # whose files() may be a MultiplexedPath: take the folder of a file inside it)
        for entry in resources.files(f"simulator.{kind}").iterdir():
            if entry.name.endswith(".yaml"):
                return Path(str(entry)).parent
    except (ModuleNotFoundError, TypeError, FileNotFoundError, NotADirectoryError):
        pass
    return Path(__file__).resolve().parents[2] / kind


#: a top-level key of a block-style YAML mapping, at the start of a line
_TOP_KEY = re.compile(r"([A-Za-z_][\w-]*)\s*:")
#: the keys a catalog file is found by (`_catalog_index`)
_NAME_KEYS = ("id", "aliases", "hf_id")


#: a one-line name entry a catalog file normally holds: `id: x`, `hf_id: org/x`, `aliases: [a, "b c"]`
_SIMPLE_SCALAR = re.compile(r"""([A-Za-z0-9][\w./+-]*|"[^"\\]*")\s*(?:#.*)?""")
_SIMPLE_LIST = re.compile(r"""\[\s*((?:(?:[A-Za-z0-9][\w./+-]*|"[^"\\]*"|'[^'\\]*')\s*,\s*)*
                          (?:[A-Za-z0-9][\w./+-]*|"[^"\\]*"|'[^'\\]*')?)\s*\]\s*(?:\#.*)?""", re.X)
_LIST_ITEM = re.compile(r"""[A-Za-z0-9][\w./+-]*|"[^"\\]*"|'[^'\\]*'""")


#: plain words YAML 1.1 reads as something other than a string
_NOT_STRINGS = frozenset(("null", "true", "false", "yes", "no", "on", "off", "y", "n", "~"))


def _plain_word(token: str) -> str | None:
    """One scalar token of `_LIST_ITEM`'s forms as YAML reads it, when that is surely a string;
    None otherwise (a word starting with a digit may be a number, `on` is a bool, ...)."""
    if token[0] in "\"'":
        return token[1:-1]
    if token[0].isdigit() or token.lower() in _NOT_STRINGS:
        return None
    return token


def _simple_value(key: str, text: str) -> Any:
    """The value of a one-line `_NAME_KEYS` entry in its plain forms, or None (then YAML reads it)."""
    if key == "aliases":
        m = _SIMPLE_LIST.fullmatch(text)
        if m is None:
            return None
        items = [_plain_word(t) for t in _LIST_ITEM.findall(m.group(1))]
        return None if any(v is None for v in items) else items
    m = _SIMPLE_SCALAR.fullmatch(text)
    return None if m is None else _plain_word(m.group(1))


def _names_of(path: Path) -> dict[str, Any]:
    """The `_NAME_KEYS` of one catalog file, parsed from their own lines only: a line that starts
    a top-level key opens a block; indented, blank, comment and `- ` lines continue it. A block
    of one line in a plain form (`_simple_value`) is read by a regular expression, any other
    by YAML; the whole file is parsed when that finds no id (a layout this scan does not
    follow). tests/test_catalog_index.py checks that this agrees with a full parse of every
    shipped file."""
    text = read_text_bounded(path, MAX_SPEC_BYTES, "catalog file")
    blocks: dict[str, list[str]] = {}
    key = None
    for line in text.splitlines(keepends=True):
        if line[:1] not in ("", " ", "\t", "#", "-", "\n", "\r"):
            m = _TOP_KEY.match(line)
            key = m.group(1) if m is not None and m.group(1) in _NAME_KEYS else None
            if key is not None:
                blocks[key] = []  # a key given twice: the full parse below refuses it
        if key is not None:
            blocks[key].append(line)
    head: Any = {}
    for k, lines in blocks.items():
        body = "".join(lines).strip()
        value = _simple_value(k, body.split(":", 1)[1].strip()) if len(lines) == 1 else None
        if value is None:
            head = None
            break
        head[k] = value
    if head is None:
        head = _parse_yaml("".join(x for v in blocks.values() for x in v), path, _CatalogLoader)
    if not (isinstance(head, dict) and isinstance(head.get("id"), str)) or len(blocks) != len(head):
        full = read_catalog_yaml(path)
        head = {k: full[k] for k in _NAME_KEYS if k in full} if isinstance(full, dict) else {}
    return head


@functools.cache
def _catalog_index(kind: str) -> dict[str, tuple[Path, dict[str, Any]]]:
    """catalog id -> (its file, its names) for `kind`, files in name order (a later file with
    the same id wins, as when every file was loaded). Only the names are parsed: a command
    loads the one or two specs it uses (`_catalog_spec`), not all 70 files."""
    out: dict[str, tuple[Path, dict[str, Any]]] = {}
    for path in iter_catalog_files(kind):
        names = _names_of(path)
        out[str(names.get("id", path.stem))] = (path, names)
    return out


@functools.cache
def _catalog_spec(kind: str, spec_id: str) -> Any:
    """The built-in spec `spec_id` of `kind`, built from its file on first use (then shared)."""
    path = _catalog_index(kind)[spec_id][0]
    data = read_catalog_yaml(path)
    spec = (hardware_from_dict if kind == "hardware_specs" else model_from_dict)(data, str(path))
    if spec.id != spec_id:  # the name scan and the full parse disagree: never silently
        raise SpecError(f"{path}: id: {spec.id!r} parsed in full, {spec_id!r} by the catalog index")
    return spec


def _in_file(path: Path | str, e: SpecError) -> SpecError:
    msg = str(e)
    return SpecError(msg if msg.startswith(str(path)) else f"{path}: {msg}")


# --------------------------------------------------------------------------- hardware


def hardware_from_dict(data: Any, source: str = "") -> HardwareSpec:
    try:
        return build(HardwareSpec, data)
    except SpecError as e:
        raise _in_file(source, e) if source else e from None


@functools.cache
def hardware_catalog() -> dict[str, HardwareSpec]:
    """All built-in accelerators by id (each file parsed once; `load_hardware` of one id
    parses only its own)."""
    return {hw_id: _catalog_spec("hardware_specs", hw_id) for hw_id in _catalog_index("hardware_specs")}


def _alias_key(name: str) -> str:
    """`H100_SXM5 80GB` and `h100-sxm5-80gb` are one name: case, `_` and spaces ignored."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def hardware_alias_index(catalog: dict[str, HardwareSpec]) -> dict[str, tuple[str, ...]]:
    """normalised id or alias -> the catalog ids it names (more than one: ambiguous)."""
    return _alias_index((hw_id, spec.aliases) for hw_id, spec in catalog.items())


def _alias_index(entries: Iterable[tuple[str, Any]]) -> dict[str, tuple[str, ...]]:
    index: dict[str, list[str]] = {}
    for hw_id, aliases in entries:
        for name in (hw_id, *aliases):
            ids = index.setdefault(_alias_key(str(name)), [])
            if hw_id not in ids:
                ids.append(hw_id)
    return {k: tuple(v) for k, v in index.items()}


@functools.cache
def _catalog_alias_index() -> dict[str, tuple[str, ...]]:
    """The built-in hardware's alias index, from the catalog index (no spec parsed)."""
    return _alias_index((hw_id, names.get("aliases") or ())
                        for hw_id, (_, names) in _catalog_index("hardware_specs").items())


def resolve_hardware_id(ref: str, catalog: dict[str, HardwareSpec] | None = None) -> str | None:
    """The canonical catalog id `ref` names (an id or alias, case-insensitive), None when it
    names none; a SpecError listing the candidates when it names more than one."""
    index = _catalog_alias_index() if catalog is None else hardware_alias_index(catalog)
    ids = index.get(_alias_key(ref), ())
    if len(ids) > 1:
        raise SpecError(f"hardware: {show(ref)} is ambiguous: it names {', '.join(ids)}; "
                        "give one of those ids")
    return ids[0] if ids else None


#: overlays on overlays: at most this many `base:` links from a file to a catalog id
MAX_OVERLAY_CHAIN = 16


def _apply_overlay(data: dict, path: Path, chain: tuple[Path, ...]) -> HardwareSpec:
    base_id = data.pop("base")
    if not isinstance(base_id, str) or not base_id:
        raise SpecError(f"{path}: base: {show(base_id)} is not a hardware id or file path")
    chain = (*chain, path.resolve())
    base_path = Path(base_id)
    if _is_file(base_path) and base_path.resolve() in chain:
        loop = " -> ".join(str(p.name) for p in (*chain, base_path.resolve()))
        raise SpecError(f"{path}: base: {show(base_id)} makes a cycle ({loop}); an overlay's base must "
                        "end at a catalog id or a full spec")
    if len(chain) > MAX_OVERLAY_CHAIN:
        raise SpecError(f"{path}: base: more than {MAX_OVERLAY_CHAIN} overlays on overlays")
    try:
        base = _load_hardware(base_id, chain)
    except SpecError as e:
        raise SpecError(f"{path}: base: {e}") from None
    merged = _to_plain(base)
    for key, value in data.items():
        if key == "efficiency" and isinstance(value, dict):
            merged["efficiency"].update(value)
        else:
            merged[key] = value
    return hardware_from_dict(merged, str(path))


def _to_plain(spec: Any) -> dict:
    import dataclasses

    out = {}
    for f in dataclasses.fields(spec):
        v = getattr(spec, f.name)
        if dataclasses.is_dataclass(v):
            v = _to_plain(v)
        elif isinstance(v, tuple):
            v = list(v)
        elif isinstance(v, dict):
            if not v and f.metadata.get("omit_when_empty"):
                continue  # optional per-format values: absent means "as the single value"
            v = dict(v)
        out[f.name] = v
    return out


def spec_to_dict(spec: Any) -> dict:
    """A spec as plain data (for JSON/YAML output); optional parts left out when empty."""
    return {k: v for k, v in _to_plain(spec).items() if v is not None}


def _is_file(path: Path) -> bool:
    """Path.is_file, False for names the OS refuses (too long, NUL byte) instead of raising."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _ref_text(kind: str, ref: Any, spec_type: type) -> str:
    """A spec reference as text: a str, or an os.PathLike (pathlib.Path) as its path."""
    if isinstance(ref, os.PathLike):
        return os.fspath(ref)  # type: ignore[return-value]
    if not isinstance(ref, str):
        raise SpecError(f"{kind}: {show(ref)} is not a catalog id, file path or {spec_type.__name__}")
    return ref


def load_hardware(ref: str | os.PathLike | HardwareSpec) -> HardwareSpec:
    """Resolve a hardware reference: catalog id, YAML file (str or Path), or overlay YAML with
    `base:` (overlays may chain, at most MAX_OVERLAY_CHAIN deep, never in a cycle)."""
    return _load_hardware(ref, ())


def _load_hardware(ref: Any, chain: tuple[Path, ...]) -> HardwareSpec:
    if isinstance(ref, HardwareSpec):
        return ref
    ref = _ref_text("hardware", ref, HardwareSpec)
    cat = _catalog_index("hardware_specs")
    if ref in cat:
        return _catalog_spec("hardware_specs", ref)
    hw_id = resolve_hardware_id(ref)
    if hw_id is not None:
        return _catalog_spec("hardware_specs", hw_id)
    path = Path(ref)
    if _is_file(path):
        data = read_yaml(path)
        if isinstance(data, dict) and "base" in data:
            return _apply_overlay(dict(data), path, chain)
        return hardware_from_dict(data, str(path))
    raise SpecError(
        f"hardware: {show(ref)} is not a catalog id or a file{_did_you_mean(ref, cat)}; "
        f"known ids: {', '.join(cat)} (see `llmsim hardware`)"
    )


# --------------------------------------------------------------------------- models


def model_from_dict(data: Any, source: str = "") -> ModelSpec:
    try:
        return build(ModelSpec, data)
    except SpecError as e:
        raise _in_file(source, e) if source else e from None


@functools.cache
def model_catalog() -> dict[str, ModelSpec]:
    """All built-in models by id (each file parsed once; `load_model` of one id parses only its own)."""
    return {mid: _catalog_spec("model_specs", mid) for mid in _catalog_index("model_specs")}


@functools.cache
def _model_aliases() -> dict[str, str]:
    """lower-case id, alias or HF id -> catalog id, from the catalog index (no spec parsed)."""
    out = {}
    for mid, (_, names) in _catalog_index("model_specs").items():
        out[mid.lower()] = mid
        for a in (*(names.get("aliases") or ()), names.get("hf_id")):
            if a:
                out[str(a).lower()] = mid
    return out


def load_model(ref: str | os.PathLike | ModelSpec) -> ModelSpec:
    """Resolve a model reference: catalog id or alias, YAML file, HF config.json, or a folder
    (str or pathlib.Path)."""
    if isinstance(ref, ModelSpec):
        return ref
    ref = _ref_text("model", ref, ModelSpec)
    aliases = _model_aliases()
    if ref.lower() in aliases:
        return _catalog_spec("model_specs", aliases[ref.lower()])
    path = Path(ref)
    if _is_dir(path):
        for name in ("config.json", "model.yaml", "model.yml"):
            if (path / name).is_file():
                path = path / name
                break
        else:
            raise SpecError(f"model: folder {ref!r} holds no config.json or model.yaml")
    if _is_file(path):
        if path.suffix == ".json":
            return import_hf_config(path)
        return model_from_dict(read_yaml(path), str(path))
    raise SpecError(
        f"model: {show(ref)} is not a catalog id, alias or file{_did_you_mean(ref, _catalog_index('model_specs'))}; "
        "see `llmsim models`"
    )


# --------------------------------------------------------------------------- HF import

_SUPPORTED_ARCHS = {
    "LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM",
    "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "DeepseekV3ForCausalLM",
    "DeepseekV2ForCausalLM", "GptOssForCausalLM", "FalconForCausalLM", "GPTJForCausalLM",
    "InternLMForCausalLM", "InternLM2ForCausalLM", "GemmaForCausalLM", "Gemma2ForCausalLM",
    "PhiForCausalLM", "Phi3ForCausalLM", "GraniteForCausalLM", "OlmoForCausalLM",
}
_GELU = {"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "relu"}


def _first(cfg: dict, *names: str, default: Any = None) -> Any:
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return default


def _count(v: Any) -> Any:
    """An optional HF count: null/0/false -> 0, a whole float -> int; anything else is passed
    on unchanged for the spec's type check to report (never a TypeError here)."""
    if v is None or v is False or v == 0:
        return 0
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


#: (HF model_type prefix, vocab_size) -> tokenizer family, for the HF importer
_HF_TOKENIZERS = {("llama", 128256): "llama3", ("qwen", 151936): "qwen", ("qwen", 152064): "qwen",
                  ("gpt_oss", 201088): "o200k"}


def tokenizer_for(model_type: str, vocab_size: object) -> str:
    """A model's tokenizer family from its HF config (model_type and vocab_size), or ""."""
    for (mt, vocab), fam in _HF_TOKENIZERS.items():
        if model_type.startswith(mt) and vocab_size == vocab:
            return fam
    return ""


def import_hf_config(path: Path | str, model_id: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config.json, reading its real field names.

    Raises SpecError naming what is missing when the architecture cannot be represented
    (encoder-decoder, state-space or vision models, configs without the core fields).
    """
    path = Path(_ref_text("config", path, ModelSpec))
    cfg = load_json(path, MAX_SPEC_BYTES, "config.json")
    if not isinstance(cfg, dict):
        raise SpecError(f"{path}: expected a JSON object, got {type(cfg).__name__}")
    if "text_config" in cfg and isinstance(cfg["text_config"], dict):
        cfg = {**cfg["text_config"], "architectures": cfg.get("architectures")}
    default_name = path.parent.name if path.name == "config.json" else path.stem
    name = model_id or cfg.get("_name_or_path") or default_name
    try:
        return model_from_hf_dict(cfg, str(name))
    except SpecError as e:
        raise _in_file(path, e) from None


def model_from_hf_dict(cfg: dict, model_id: str) -> ModelSpec:
    """Map HF config fields onto a ModelSpec (see docs/performance_model.md's Symbols table)."""
    archs = cfg.get("architectures") or []
    arch = str(archs[0]) if isinstance(archs, list) and archs else str(cfg.get("model_type", "?"))
    if cfg.get("is_encoder_decoder"):
        raise SpecError(f"architectures: {arch} is encoder-decoder; llmsim models decoder-only transformers")
    required = {
        "hidden_size": ("hidden_size", "n_embd", "d_model"),
        "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
        "num_heads": ("num_attention_heads", "n_head", "num_heads"),
    }
    fields: dict[str, Any] = {"id": model_id, "name": model_id, "hf_id": model_id}
    for key, names in required.items():
        v = _first(cfg, *names)
        if v is None:
            raise SpecError(
                f"{names[0]}: missing; cannot represent architecture {show(arch)} without it"
            )
        fields[key] = v
    H = fields["hidden_size"]
    mt = str(cfg.get("model_type", "")).lower()
    fields["num_kv_heads"] = _first(cfg, "num_key_value_heads", "n_head_kv", "num_kv_heads",
                                    default=1 if cfg.get("multi_query") else fields["num_heads"])
    if cfg.get("new_decoder_architecture") and cfg.get("num_kv_heads"):
        fields["num_kv_heads"] = cfg["num_kv_heads"]
    vocab = cfg.get("vocab_size")
    if vocab is None:
        raise SpecError(f"vocab_size: missing; cannot represent architecture {show(arch)} without it")
    fields["vocab_size"] = vocab
    fields["tokenizer"] = tokenizer_for(mt, vocab)
    if cfg.get("head_dim") is not None:
        fields["head_dim"] = cfg["head_dim"]
    act = str(_first(cfg, "hidden_act", "activation_function", "hidden_activation", default="silu"))
    gated = act not in _GELU or mt in ("gemma", "gemma2")
    fields["mlp"] = "gated" if gated else "plain"
    inter = _first(cfg, "intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim")
    if inter is None:
        # GPT-J, Falcon: n_inner null means 4*H (a non-integer H is reported by the type check)
        inter = 4 * H if is_int(H) else H
    fields["intermediate_size"] = inter
    fields["max_context"] = _first(cfg, "max_position_embeddings", "n_positions", "seq_length", default=4096)
    fields["tie_word_embeddings"] = bool(cfg.get("tie_word_embeddings", False))
    # Qwen2 / Qwen2-MoE put a bias on q/k/v by architecture: their configs have no such key
    fields["attention_bias"] = bool(_first(cfg, "attention_bias", "bias", "qkv_bias",
                                           default=mt in ("qwen2", "qwen2_moe")))
    fields["mlp_bias"] = bool(cfg.get("mlp_bias", False)) or mt == "gptj"
    fields["parallel_attention"] = bool(cfg.get("parallel_attn", False)) or mt == "gptj"
    if mt == "falcon" and cfg.get("new_decoder_architecture"):
        fields["parallel_attention"] = True

    _hf_structure(cfg, fields, mt)
    method = _quant_method(cfg)
    if method == "fp8":
        fields["default_weight_dtype"] = "fp8"
        if str((cfg.get("quantization_config") or {}).get("activation_scheme", "")).lower() in ("dynamic", "static"):
            fields["default_activation_dtype"] = "fp8"  # W8A8: the activations are quantised too
    elif method == "mxfp4":
        # what vLLM loads: the routed experts in MXFP4 (4-bit), the rest (attention, router,
        # embeddings, LM head: modules_to_not_convert) in bf16
        fields["default_weight_dtype"] = "fp4"
        if fields.get("moe") is not None:
            fields["quantized_weights"] = "experts"
            fields["unquantized_weight_dtype"] = "bf16"
            fields["notes"] = "experts are MXFP4 in the published checkpoint; attention and embeddings bf16"
        else:  # no such checkpoint is known: every weight is priced at fp4, and said
            fields["notes"] = "an MXFP4 checkpoint without experts: every weight priced at fp4 (embeddings too)"
    elif method:  # a format the import does not map: said, not silently bf16
        fields["notes"] = (f"the checkpoint is quantized ({method}); imported with bf16 weights: "
                           "give the run's --weight-dtype (e.g. int4, int8, fp8)")
    if arch not in _SUPPORTED_ARCHS:
        fields["notes"] = f"imported from an unrecognised architecture {show(arch)}: check the figures"
    return build(ModelSpec, fields)


#: `quantization_config.quant_method` values of HF configs: those that set a weight format
#: here (fp8; mxfp4 noted), and those the import reads as 16-bit weights (the user picks
#: `--weight-dtype`, e.g. int4 for awq/gptq); anything else is refused, not read as bf16
QUANT_METHODS = ("fp8", "mxfp4", "awq", "gptq", "compressed-tensors", "bitsandbytes", "fbgemm_fp8",
                 "modelopt", "nvfp4", "gguf", "hqq", "eetq", "aqlm", "quark", "torchao", "bitnet")


def _quant_method(cfg: dict) -> str:
    """The checkpoint's `quantization_config.quant_method` ("" when none), lower-case."""
    q = cfg.get("quantization_config")
    if q is None or q == {}:
        return ""
    if not isinstance(q, dict):
        raise SpecError(f"quantization_config: {show(q)} is not a mapping")
    method = q.get("quant_method", "")
    if method is None or method == "":
        return ""
    if not isinstance(method, str) or method.lower() not in QUANT_METHODS:
        raise SpecError(f"quantization_config.quant_method: {show(method)} is not one of "
                        f"{', '.join(QUANT_METHODS)}")
    return method.lower()


def _hf_structure(cfg: dict, fields: dict[str, Any], mt: str) -> None:
    """The MoE, MLA and windowed-attention parts of an HF config into `fields`."""
    if mt == "llama4_text":
        # dense layers use intermediate_size_mlp; intermediate_size is the experts' width
        fields["intermediate_size"] = cfg.get("intermediate_size_mlp", fields["intermediate_size"])
    moe_spec = _hf_moe(cfg)
    if moe_spec is not None:
        fields["moe"] = moe_spec
    mla_spec = _hf_mla(cfg)
    if mla_spec is not None:
        fields["mla"] = mla_spec
    window_spec = _hf_chunked_attention(cfg, fields["num_layers"]) or _hf_sliding_window(cfg, fields["num_layers"])
    if window_spec is not None:
        fields["sliding_window"] = window_spec


def _hf_moe(cfg: dict) -> MoESpec | None:
    """Routed experts from an HF config (Mixtral, DeepSeek, Qwen-MoE names); None if dense."""
    experts = _first(cfg, "num_local_experts", "n_routed_experts", "num_experts")
    if not experts:
        return None
    k = _first(cfg, "num_experts_per_tok", "experts_per_token", "moe_top_k")
    if k is None:
        raise SpecError("num_experts_per_tok: missing for an MoE model; cannot route tokens")
    moe: dict[str, Any] = {
        "num_experts": experts,
        "experts_per_token": k,
        "expert_intermediate_size": _first(cfg, "moe_intermediate_size", "intermediate_size"),
        "num_shared_experts": _count(cfg.get("n_shared_experts")),
        "first_dense_layers": _count(cfg.get("first_k_dense_replace")),
    }
    if str(cfg.get("model_type", "")).lower() == "llama4_text":
        # Llama4TextMoe: one shared expert as wide as a routed one; MoE on every
        # interleave_moe_layer_step-th layer, the others dense (placed first: counts, FLOPs and
        # bytes exact, pipeline stage balance not)
        moe["num_shared_experts"] = 1
        step = _count(cfg.get("interleave_moe_layer_step", 1)) or 1
        layers = _count(cfg.get("num_hidden_layers")) or 0
        moe["first_dense_layers"] = layers - layers // step if isinstance(step, int) and isinstance(layers, int) else 0
    if cfg.get("shared_expert_intermediate_size") and isinstance(moe["num_shared_experts"], int):
        moe["num_shared_experts"] = max(1, moe["num_shared_experts"])
        moe["shared_expert_intermediate_size"] = cfg["shared_expert_intermediate_size"]
    if cfg.get("mlp_only_layers"):
        raise SpecError("mlp_only_layers: non-empty lists of dense layers inside an MoE stack are not supported")
    return build(MoESpec, moe, "moe")


def _hf_mla(cfg: dict) -> MLASpec | None:
    """DeepSeek multi-head latent attention from an HF config; None without kv_lora_rank."""
    if not cfg.get("kv_lora_rank"):
        return None
    mla = {
        "kv_lora_rank": cfg["kv_lora_rank"],
        "qk_nope_head_dim": cfg.get("qk_nope_head_dim"),
        "qk_rope_head_dim": cfg.get("qk_rope_head_dim"),
        "v_head_dim": cfg.get("v_head_dim"),
        "q_lora_rank": cfg.get("q_lora_rank"),
    }
    for k2, v in mla.items():
        if v is None and k2 != "q_lora_rank":
            raise SpecError(f"{k2}: missing; MLA attention (kv_lora_rank set) needs it")
    return build(MLASpec, mla, "mla")


def _hf_chunked_attention(cfg: dict, num_layers: Any) -> SlidingWindowSpec | None:
    """Llama-4's chunked local attention (attention_chunk_size) on the RoPE layers, modelled as a
    sliding window of the chunk size (KV bound right; FLOPs up to 2x high at long context):
    every layer but each 4th (no_rope_layers, or Llama-4's default 3 of 4 when the list is
    empty or absent). None without attention_chunk_size."""
    chunk = cfg.get("attention_chunk_size")
    if not chunk or not isinstance(num_layers, int):
        return None
    nope = cfg.get("no_rope_layers")
    n = sum(1 for x in nope if x) if isinstance(nope, list) and nope else num_layers - num_layers // 4
    return build(SlidingWindowSpec, {"window": chunk, "num_layers": n}, "sliding_window") if n else None


def _hf_sliding_window(cfg: dict, num_layers: Any) -> SlidingWindowSpec | None:
    """Sliding-window layers: those `layer_types` marks sliding, else every layer; None if off."""
    window = cfg.get("sliding_window")
    use_sw = cfg.get("use_sliding_window", True)
    if not (window and use_sw):
        return None
    types_ = cfg.get("layer_types")
    if isinstance(types_, list):
        n_sw = sum(1 for t in types_ if t == "sliding_attention")
    else:
        n_sw = num_layers
    if not n_sw:
        return None
    return build(SlidingWindowSpec, {"window": window, "num_layers": n_sw}, "sliding_window")


def iter_catalog_files(kind: str) -> Iterator[Path]:
    yield from sorted(_catalog_dir(kind).glob("*.yaml"))
