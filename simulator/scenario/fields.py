"""Typed, documented configuration: ``F`` declares a field (doc, unit, vLLM knob, bounds) of a config
dataclass, ``build`` checks a mapping against such a dataclass and builds it (one-line errors naming
the field path, the rule and the value), ``field_reference`` lists every field for the docs.

The field system knows nothing of what the fields mean: ``simulator.scenario.config`` (the scenario) and
``workloads.config`` (the workload section) both declare their dataclasses with it.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import field
from typing import TYPE_CHECKING, Any, Literal, Union, cast

from simulator.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def F(default: Any = dataclasses.MISSING, doc: str = "", unit: str = "", vllm: str = "", **rules: Any) -> Any:
    """A documented scenario field. ``rules``: ge, gt, le, lt (numeric bounds); ``among``: the values
    allowed (a number's, where only some are); ``only``: {sibling field: values} for a field that
    means something only when a sibling has one of those values (setting it otherwise is an error,
    not silently ignored); ``instead``: {sibling value: what to set instead}, named in that error; ``shape``: what the reference calls a field the owning dataclass checks
    itself (type ``Any``), ``schema``: its JSON Schema (or a function returning it); ``units``: the unit of a nested mapping's fields that have one (a length
    distribution of turns rather than tokens)."""
    meta = {"doc": doc, "unit": unit, "vllm": vllm, **rules}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    if dataclasses.is_dataclass(default):
        return field(default_factory=lambda: default, metadata=meta)
    return field(default=default, metadata=meta)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _type_name(a) for a in typing.get_args(tp))
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return {int: "integer", float: "number", bool: "true/false", str: "string", dict: "mapping"}.get(tp, str(tp))


# The largest integer a field takes: exactly a float too (YAML's 1e9 is one), and far inside the
# 64-bit counters a run keeps.
MAX_INT = 2**53


def _finite(value: int | float) -> bool:
    """Whether ``value`` is a finite number (a Python int always is; one too large for a float too)."""
    return isinstance(value, int) or math.isfinite(value)


def _as_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _coerce(tp: Any, value: Any, path: str, base: Any = None, units: str = "") -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(a, value, path, base, units)
            except ConfigError as e:
                errors.append(e)
        raise errors[0] if len(errors) == 1 else ConfigError(f"{path} must be {_type_name(tp)} (got {value!r})")
    if origin is Literal:
        choices = typing.get_args(tp)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value not in choices:
            # A version written as a number (vllm_version: 0.10) names the choice it reads as.
            value = next((c for c in choices if isinstance(c, str) and _as_number(c) == value), value)
        if value not in choices:
            hint = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise ConfigError(f"{path} must be one of {', '.join(map(repr, choices))} (got {value!r}){extra}")
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{path} must be a mapping (got {value!r})")
        cls = cast(type, tp)  # a field's type: a dataclass, not an instance of one
        return build(cls, value, path, base if isinstance(base, cls) else None, units)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path} must be true or false (got {value!r})")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value) or int(value) != value:
            raise ConfigError(f"{path} must be an integer (got {value!r})")
        if abs(value) > MAX_INT:
            raise ConfigError(f"{path} must be an integer of at most 2**53 = {MAX_INT:,} in size (got {value!r})")
        return int(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path} must be a number (got {value!r})")
        if not _finite(value):
            raise ConfigError(f"{path} must be a finite number (got {value!r})")
        return float(value) + 0.0  # -0.0 as 0.0: a sign a bound cannot see, which numpy refuses as a scale
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path} must be a string (got {value!r})")
        return value
    if tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path} must be a mapping (got {value!r})")
        return value
    if tp is Any:  # shapes that the owning dataclass checks itself (its __post_init__)
        return value
    raise TypeError(f"unsupported field type {tp}")


def _unit(f: dataclasses.Field, units: str = "") -> str:
    """A field's unit; ``units``: the unit its enclosing mapping gives the fields that have one."""
    unit = f.metadata.get("unit", "")
    return units if unit and units else unit


def _check_bounds(f: dataclasses.Field, value: Any, path: str, raw: Any = None, units: str = "") -> None:
    if value is None or isinstance(value, (bool, str, dict)) or dataclasses.is_dataclass(value):
        return
    unit = _unit(f, units)
    u = f" {unit}" if unit else ""
    for rule, op, ok in (
        ("ge", ">=", lambda v, b: v >= b),
        ("gt", ">", lambda v, b: v > b),
        ("le", "<=", lambda v, b: v <= b),
        ("lt", "<", lambda v, b: v < b),
    ):
        bound = f.metadata.get(rule)
        if bound is not None and not ok(value, bound):
            raise ConfigError(f"{path} must be {op} {bound}{u} (got {value if raw is None else raw!r})")
    among = f.metadata.get("among")
    if among is not None and value not in among:
        raise ConfigError(
            f"{path} must be one of {', '.join(map(str, among))}{u} (got {value if raw is None else raw!r})"
        )


def _inner(tp: Any, key: str) -> Any:
    """The type at ``key`` inside ``tp`` (a dataclass, a mapping of free keys, or an optional one of
    them); None where there is none."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        found = [t for t in (_inner(a, key) for a in typing.get_args(tp)) if t is not None]
        return found[0] if found else None
    if typing.get_origin(tp) is dict:
        return typing.get_args(tp)[1]
    if dataclasses.is_dataclass(tp):
        return typing.get_type_hints(tp).get(key)
    return None


def gated_fields(cls: type, dotted: str) -> dict[str, tuple[tuple, Any, dict]]:
    """The fields beside ``dotted`` (a path into ``cls``) that mean something only for some values of
    it (``F``'s ``only``): name -> (those values, the field's default, its counterparts by value:
    ``instead``). Empty where the path leads to no mapping of fields."""
    keys = dotted.split(".")
    tp: Any = cls
    for k in keys[:-1]:
        tp = _inner(tp, k)
        if tp is None:
            return {}
    if typing.get_origin(tp) in (Union, types.UnionType):
        tp = next((a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)), None)
    if not dataclasses.is_dataclass(tp):
        return {}
    leaf = keys[-1]
    return {
        f.name: (tuple(f.metadata["only"][leaf]), default_of(f), dict(f.metadata.get("instead", {})))
        for f in dataclasses.fields(tp)
        if leaf in f.metadata.get("only", {})
    }


def default_of(f: dataclasses.Field) -> Any:
    """A field's default value (an instance, for a field whose default is a mapping of fields)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def build(cls: type, data: dict, path: str = "", base: Any = None, units: str = "") -> Any:
    """Check ``data`` against dataclass ``cls`` and build it; unknown keys get a did-you-mean.

    ``base``: the instance ``data`` updates (a field's default, such as an output length whose
    default differs from the class's): the fields ``data`` leaves out keep its values, so a partial
    mapping means what ``servesim fields`` documents. ``units``: see ``F``."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            where = f"{path}.{key}" if path else str(key)
            hint = difflib.get_close_matches(str(key), list(fields), n=1)
            extra = f"; did you mean '{hint[0]}'?" if hint else f"; known keys: {', '.join(fields)}"
            raise ConfigError(f"{where}: unknown key{extra}")
    kwargs = {}
    for name, f in fields.items():
        where = f"{path}.{name}" if path else name
        default = getattr(base, name) if base is not None else default_of(f)
        if name in data:
            value = _coerce(hints[name], data[name], where, default, f.metadata.get("units", ""))
            _check_bounds(f, value, where, data[name], units)
            kwargs[name] = value
        elif base is not None:
            kwargs[name] = default
    _check_only(fields, data, kwargs, path, base)
    return cls(**kwargs)


def _check_only(fields: dict, data: dict, kwargs: dict, path: str, base: Any) -> None:
    """Fields given that mean something only beside a sibling's other value (``F``'s ``only``). One
    gated on the serving engine (``framework``) may be left at its default, as a scenario written for
    the other engine leaves it; the others are named in one line, with their counterparts
    (``instead``)."""
    wrong: list[tuple[str, str, Any, str | None]] = []
    for name in data:
        meta = fields[name].metadata
        for sibling, allowed in meta.get("only", {}).items():
            value = kwargs.get(sibling, getattr(base, sibling) if base is not None else default_of(fields[sibling]))
            if value in allowed:
                continue
            where = f"{path}.{name}" if path else name
            if sibling != "framework":
                choices = " or ".join(repr(a) for a in allowed)
                hint = ""
                if sibling not in data:  # the sibling was left at its default: say what to set beside it
                    at = f"{path}.{sibling}" if path else sibling
                    hint = f"; set {at}={allowed[0]} too" if len(allowed) == 1 else f"; set {at} too"
                    value_note = f"{value!r}, the default"
                else:
                    value_note = repr(value)
                raise ConfigError(f"{where}: only for {sibling} {choices} (got {sibling} {value_note}){hint}")
            if kwargs[name] != default_of(fields[name]):
                wrong.append((where, sibling, value, meta.get("instead", {}).get(value)))
    if not wrong:
        return
    sibling, value = wrong[0][1], wrong[0][2]
    others = [o for *_, o in wrong if o]
    allowed = fields[wrong[0][0].rsplit(".", 1)[-1]].metadata["only"][sibling]
    head = f"{', '.join(w for w, *_ in wrong)}: only for {sibling} {' or '.join(repr(a) for a in allowed)} (got {sibling} {value!r})"
    if len(wrong) == 1:
        raise ConfigError(head + (f"; with {sibling} {value!r} set {others[0]}" if others else ""))
    hint = f"set {', '.join(others)} instead, or remove them" if others else "remove them"
    raise ConfigError(f"{head}; {hint}")


def field_reference(
    cls: type, prefix: str = "", instance: Any = None, units: str = ""
) -> list[tuple[str, str, str, str, str, str]]:
    """(path, type, default, unit, vLLM knob, doc) for every field, for docs and `servesim fields`.
    A nested mapping's defaults are its field default's values (``instance``), as runs use them;
    ``units``: see ``F``."""
    rows = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        tp = hints[f.name]
        inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
        sub = cast("type | None", tp if dataclasses.is_dataclass(tp) else (inner[0] if inner else None))  # a dataclass
        default = getattr(instance, f.name) if instance is not None else default_of(f)
        if sub is not None:
            rows.append(
                (
                    path,
                    "mapping" + (" or null" if inner else ""),
                    "" if not inner else "null",
                    "",
                    "",
                    f.metadata.get("doc", ""),
                )
            )
            rows.extend(
                field_reference(
                    sub, path + ".", default if isinstance(default, sub) else None, f.metadata.get("units", "")
                )
            )
        else:
            d = "null" if default is None else repr(default)
            rows.append(
                (
                    path,
                    f.metadata.get("shape") or _type_name(tp),
                    d,
                    _unit(f, units),
                    f.metadata.get("vllm", ""),
                    f.metadata.get("doc", ""),
                )
            )
    return rows


def _json_default(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {k: _json_default(v) for k, v in dataclasses.asdict(cast("DataclassInstance", value)).items()}
    if isinstance(value, (list, tuple)):
        return [_json_default(v) for v in value]
    return value


def _type_schema(tp: Any) -> dict:
    """The JSON Schema of a field type (as ``build`` accepts it: an integer may be written 2e3)."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return {"anyOf": [_type_schema(a) for a in typing.get_args(tp)]}
    if origin is Literal:
        choices = list(typing.get_args(tp))
        numbers = [float(c) for c in choices if isinstance(c, str) and _as_number(c) is not None]
        return {"enum": choices + numbers}  # a version may be written as a number (vllm_version: 0.10)
    if dataclasses.is_dataclass(tp):
        return json_schema(cast(type, tp))
    if tp is type(None):
        return {"type": "null"}
    return {
        int: {"type": "integer"},
        float: {"type": "number"},
        bool: {"type": "boolean"},
        str: {"type": "string"},
        dict: {"type": "object"},
        Any: {},
    }[tp]


def json_schema(cls: type, title: str | None = None) -> dict:
    """A JSON Schema (draft 2020-12) of dataclass ``cls`` for editors: every field with its type,
    bounds, allowed values, default and documentation; unknown keys are errors, as in ``build``.
    Rules between fields (``only``) and shapes a dataclass checks itself are left to ``build``."""
    hints = typing.get_type_hints(cls)
    props = {}
    for f in dataclasses.fields(cls):
        s = dict(_type_schema(hints[f.name]))
        m = f.metadata
        unit = f" [{m['unit']}]" if m.get("unit") else ""
        vllm = f" (vLLM: {m['vllm']})" if m.get("vllm") else ""
        if m.get("doc") or unit or vllm:
            s["description"] = f"{m.get('doc', '')}{unit}{vllm}".strip()
        for rule, key in (("ge", "minimum"), ("gt", "exclusiveMinimum"), ("le", "maximum"), ("lt", "exclusiveMaximum")):
            if m.get(rule) is not None:
                s[key] = m[rule]
        if m.get("among") is not None:
            s["enum"] = list(m["among"])
        if m.get("schema") is not None:  # a field of type Any that says what its JSON Schema is
            s.update(m["schema"]() if callable(m["schema"]) else m["schema"])
        default = default_of(f)
        if not dataclasses.is_dataclass(default):
            s["default"] = _json_default(default)
        props[f.name] = s
    out: dict = {"type": "object", "additionalProperties": False, "properties": props}
    if title is not None:
        out = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, **out}
    return out
