"""Configuration files (`nmt train --config FILE`, `nmt model-info --config FILE`): YAML or JSON
with the sections ``preset:``, ``model:`` and ``train:`` of nmt.config's dataclasses, read with errors
that name the file and, for YAML, the line (a misspelled section or field, a wrong value, a key given
twice), and applied under the command line's ``--model.*`` / ``--train.*`` overrides."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from .config import PRESETS, ConfigError, ModelConfig, apply_overrides, to_dict


def save(path: str | Path, sections: dict[str, Any]) -> None:
    """Write ``{"model": ModelConfig, ...}`` as YAML (.yaml/.yml) or JSON (anything else)."""
    path = Path(path)
    data = {k: to_dict(v) for k, v in sections.items()}
    if path.suffix in (".yaml", ".yml"):
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    else:
        path.write_text(json.dumps(data, indent=2) + "\n")


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load's loader, except that a key given twice in one mapping is an error (YAML
    itself keeps the last value without a word)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):  # not a name: load_config_file says so
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{key!r} given twice in one section", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _unique_json_keys(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    twice = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
    if twice is not None:
        raise ValueError(f"{twice!r} given twice in one object")
    return dict(pairs)


def load_raw(path: str | Path) -> dict:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
        else:
            data = json.loads(text, object_pairs_hook=_unique_json_keys)
    except yaml.YAMLError as e:  # one line: where and what (its str() spans several lines)
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ConfigError(
            f"{path}: {where}not valid YAML ({getattr(e, 'problem', None) or type(e).__name__})"
        ) from None
    except ValueError as e:  # json.JSONDecodeError, or a key given twice
        raise ConfigError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections (model:, train:, ...)")
    return data


SECTIONS = ("preset", "model", "train")  # of a --config file


def load_config_file(path: str | Path) -> dict:
    """A --config file as ``{"preset": name (if given), "model": {...}, "train": {...}}`` (an empty
    section is ``{}``); a misspelled section, a preset that is not a name, a section that is not a
    mapping of fields or a field name that is not text is a ConfigError naming the file (and the line)."""
    data = load_raw(path)
    misspelled = sorted((str(k) for k in data if k not in SECTIONS))
    if misspelled:
        raise ConfigError(f"{path}: unknown section {misspelled[0]!r}; sections are preset:, model:, train:")
    if "preset" in data and (not isinstance(data["preset"], str) or data["preset"] not in PRESETS):
        raise ConfigError(
            f"{path}: {_where(path, 'preset')}preset={data['preset']!r}: unknown preset; "
            f"choose from {sorted(PRESETS)}"
        )
    for section in ("model", "train"):
        values = data.get(section)
        if values is None:
            data[section] = {}
        elif not isinstance(values, dict):
            raise ConfigError(
                f"{path}: {_where(path, section)}{section}: expected a mapping of fields "
                f"(name: value, one a line), got {type(values).__name__} {values!r}"
            )
        elif any(not isinstance(k, str) for k in values):
            key = next(k for k in values if not isinstance(k, str))
            raise ConfigError(f"{path}: {_where(path, section)}{section}: field name {key!r} is not a name")
    return data


def _where(path: str | Path, section: str, name: str | None = None) -> str:
    """'line N: ' of ``section`` (or of its field ``name``) in YAML file ``path``; '' when unknown."""
    if Path(path).suffix not in (".yaml", ".yml"):
        return ""
    try:
        node = yaml.compose(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return ""
    for key in (section, name) if name is not None else (section,):
        if not isinstance(node, yaml.MappingNode):
            return ""
        found = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key]
        if not found:
            return ""
        key_node, node = found[0]  # keys are unique (_UniqueKeyLoader)
    return f"line {key_node.start_mark.line + 1}: "


def apply_config(cfg: Any, *, section: str, path: str | Path | None, values: dict, overrides: dict) -> Any:
    """``cfg`` with a --config file's ``values`` for ``section`` and then the command line's
    ``overrides`` on top, checked together (a value may need another: ``max_steps: 0`` in the file with
    ``--train.max_time=5``); an error about a value of the file names the file and its line."""
    try:
        return apply_overrides(cfg, {**values, **overrides}, section=section)
    except ConfigError as e:
        prefix, _, name = (e.field or "").partition(".")
        if path is None or prefix != section or name not in values or name in overrides:
            raise
        raise ConfigError(f"{path}: {_where(path, section, name)}{e}", field=e.field) from None


def load_model_config(path: str | Path) -> ModelConfig:
    data = load_config_file(path)
    return apply_config(ModelConfig(), section="model", path=path, values=data["model"], overrides={})
