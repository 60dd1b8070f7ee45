"""YAML as scenarios and catalogues are read: the safe loader (libyaml's when present, it is faster),
with numbers in scientific notation without a dot (``1e5``, ``2E-3``) read as numbers. YAML 1.1,
which PyYAML follows, reads those as strings; YAML 1.2 and every user read them as numbers."""

from __future__ import annotations

import re

import yaml

_SCIENTIFIC = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


class PlainLoader(yaml.SafeLoader):
    """The pure-Python safe loader: its error messages (read by users) are the same everywhere."""


class Loader(getattr(yaml, "CSafeLoader", PlainLoader)):  # type: ignore[misc]
    pass


for _cls in (Loader, PlainLoader):
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _SCIENTIFIC, list("-+0123456789"))


def load(text: str):
    try:
        return yaml.load(text, Loader=Loader)
    except yaml.YAMLError:
        if issubclass(Loader, PlainLoader):
            raise
        return yaml.load(text, Loader=PlainLoader)
