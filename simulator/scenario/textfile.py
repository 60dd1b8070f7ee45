"""Text files users give (scenarios, traces, length files, calibrations) read the way they are
saved: UTF-8, with or without the byte-order mark that spreadsheets and Windows editors write at
the start; anything else is one line naming the file, where it stops being UTF-8 and how to fix it."""

from __future__ import annotations

from pathlib import Path

from simulator.errors import ConfigError

ENCODING = "utf-8-sig"  # UTF-8; a leading byte-order mark, if any, is not part of the text


def _not_utf8(shown: str | Path, data: bytes, e: UnicodeDecodeError) -> ConfigError:
    line = data.count(b"\n", 0, e.start) + 1
    return ConfigError(
        f"{shown} line {line}: not UTF-8 text (byte 0x{data[e.start]:02x}); save it as UTF-8 "
        "(in a spreadsheet: CSV UTF-8)"
    )


def read_text(path: str | Path, shown: str | Path | None = None) -> str:
    """The text of ``path`` (see the module docstring); ``shown``: the name errors give it."""
    data = Path(path).read_bytes()
    try:
        return data.decode(ENCODING)
    except UnicodeDecodeError as e:
        raise _not_utf8(shown or path, data, e) from None


def utf8_error(path: str | Path, shown: str | Path | None = None) -> ConfigError:
    """The error for ``path``, which a streaming reader found is not UTF-8 (where it stops being)."""
    data = Path(path).read_bytes()
    try:
        data.decode(ENCODING)
    except UnicodeDecodeError as e:
        return _not_utf8(shown or path, data, e)
    return ConfigError(f"{shown or path}: not UTF-8 text")
