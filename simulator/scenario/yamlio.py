"""YAML as scenarios and catalogues are read: the safe loader (libyaml's when present, it is faster),
with numbers in scientific notation without a dot (``1e5``, ``2E-3``) read as numbers. YAML 1.1,
which PyYAML follows, reads those as strings; YAML 1.2 and every user read them as numbers.

Bounded: a text longer than ``MAX_BYTES``, or whose aliases would expand it to more than
``MAX_VALUES`` values (a "billion laughs" file: a few lines of nested aliases that grow into
billions of values wherever the data is walked), or that refers to itself, is refused with one line
before anything is built from it. Aliases are counted on the document's node graph, each shared
node once, so the check costs as much as the text.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from simulator.errors import ConfigError

_SCIENTIFIC = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")
MAX_BYTES = 4 << 20  # the largest YAML file servesim reads (its own largest, validation data: ~180 kB)
MAX_VALUES = 1_000_000  # values in a document with its aliases expanded (a scenario has a few hundred)


class PlainLoader(yaml.SafeLoader):
    """The pure-Python safe loader: its error messages (read by users) are the same everywhere."""


class Loader(getattr(yaml, "CSafeLoader", PlainLoader)):  # type: ignore[misc]
    pass


for _cls in (Loader, PlainLoader):
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _SCIENTIFIC, list("-+0123456789"))


def _expanded(node: yaml.Node, source: str) -> int:
    """How many values ``node`` stands for once every alias in it is expanded (a shared node counts
    each time it is used, but is visited once); a node that contains itself is refused."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    open_: set[int] = set()
    while stack:
        n, children_done = stack.pop()
        key = id(n)
        if children_done:
            open_.discard(key)
            kids = _children(n)
            sizes[key] = min(1 + sum(sizes[id(k)] for k in kids), MAX_VALUES + 1)
            continue
        if key in sizes:
            continue
        if key in open_:
            raise ConfigError(f"{source}: an alias refers to a value that contains it; YAML must not refer to itself")
        open_.add(key)
        stack.append((n, True))
        for k in _children(n):
            if id(k) in open_:
                raise ConfigError(
                    f"{source}: an alias refers to a value that contains it; YAML must not refer to itself"
                )
            if id(k) not in sizes:
                stack.append((k, False))
    return sizes[id(node)]


def _children(n: yaml.Node) -> list[yaml.Node]:
    if isinstance(n, yaml.SequenceNode):
        return list(n.value)
    if isinstance(n, yaml.MappingNode):
        return [x for pair in n.value for x in pair]
    return []


def _load(text: str, loader_cls: type, source: str) -> Any:
    loader = loader_cls(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        n = _expanded(node, source)
        if n > MAX_VALUES:
            raise ConfigError(
                f"{source}: its aliases expand to more than {MAX_VALUES:,} values; servesim reads YAML "
                "up to that size (write the values out, or use fewer nested aliases)"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load(text: str, source: str = "YAML") -> Any:
    """The document in ``text`` (``source``: what errors call it), bounded as the module docstring says.
    Malformed YAML raises ``yaml.YAMLError``; too large a document, ``ConfigError``."""
    if len(text) > MAX_BYTES:
        raise ConfigError(
            f"{source}: {len(text.encode()):,} bytes; servesim reads YAML files up to {MAX_BYTES:,} bytes"
        )
    try:
        return _load(text, Loader, source)
    except yaml.YAMLError:
        if issubclass(Loader, PlainLoader):
            raise
        return _load(text, PlainLoader, source)


def parse(text: str, source: str) -> Any:
    """``load``, with malformed YAML as one line too: where it stops being YAML, and why."""
    try:
        return load(text, source)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{source}: malformed YAML{where}: {problem}") from None
