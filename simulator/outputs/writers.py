"""Result files written whole or not at all: text and JSON through a temporary file and a rename,
CSV formatted by the compiled formatter (integers as integers, other numbers as ``%.9g``)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from simulator.errors import ConfigError

_SPECIAL = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
)


def special_kind(path: Path) -> str | None:
    """What ``path`` is when it exists and is neither an ordinary file nor a folder (a symbolic
    link counts, whatever it points to); None otherwise."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((what for test, what in _SPECIAL if test(mode)), "not an ordinary file")


def refuse_special(path: Path, flag: str = "") -> None:
    """One line naming ``flag`` (the option that named ``path``; none: a writer's own check, as it
    writes) if ``path`` is a symbolic link, a device, a named pipe or a socket: a write goes through
    a temporary file and a rename, which would replace it."""
    what = special_kind(path)
    if what is not None:
        where, then = (f"{flag} {path}", "give another path (nothing was written)") if flag else (path, "left as it is")
        raise ConfigError(
            f"{where}: {what}; servesim writes only ordinary files and folders (writing would replace it); {then}"
        )


def publish(tmp: str, path: Path) -> None:
    """Move a finished temporary file into place, with the permissions a plain open() would give;
    never over a symbolic link, a device, a named pipe or a socket (``refuse_special``)."""
    refuse_special(Path(path))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, path)


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file and a rename: a reader never sees a half-written file."""
    atomic_write_bytes(path, text.encode())


@contextlib.contextmanager
def text_file(path: Path) -> Iterator[io.StringIO]:
    """``with text_file(path) as f: f.write(...)``: the text written, put in place atomically once the
    block ends without an error (as ``atomic_write_text``)."""
    buf = io.StringIO(newline="")
    yield buf
    atomic_write_text(path, buf.getvalue())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        publish(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _csv_field(text: str) -> str:
    if any(ch in text for ch in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_text(columns) -> bytes:
    """CSV of the columns (a mapping of names to arrays, or a DataFrame): integers as integers, other
    numbers with 9 significant digits (as ``%.9g``), NaN and None as empty fields."""
    from simulator.engine import compiled
    from simulator.engine.compiled.text import G9, INT, STR
    from simulator.progress import compile_step

    compile_step()  # the formatter is part of the compiled step

    names = list(columns)
    nrows = len(columns[names[0]]) if names else 0
    kinds = np.zeros(len(names), np.int64)
    vals = np.zeros((len(names), nrows))
    table: dict[str, int] = {}
    for j, name in enumerate(names):
        a = np.asarray(columns[name])
        if a.dtype.kind in "iub":
            kinds[j] = INT
            vals[j] = a
        elif a.dtype.kind == "f":
            kinds[j] = G9
            vals[j] = a
        else:  # strings: indices into a table of their (quoted) texts
            kinds[j] = STR
            values = [v if v is None or isinstance(v, (str, float)) else str(v) for v in a.tolist()]
            code = {
                v: table.setdefault("" if v is None or v != v else _csv_field(str(v)), len(table))
                for v in dict.fromkeys(values)
            }  # each distinct value once, in order of appearance
            vals[j] = [code[v] for v in values]
    strs = [t.encode() for t in table]
    strtab = np.frombuffer(b"".join(strs), np.uint8) if strs else np.zeros(1, np.uint8)
    stroff = np.concatenate(([0], np.cumsum([len(t) for t in strs], dtype=np.int64))).astype(np.int64)
    widest = max((len(t) for t in strs), default=0)
    per_row = sum(24 if k != STR else widest for k in kinds) + len(names) + 1
    fmt = compiled.load().format_rows
    parts = [(",".join(_csv_field(n) for n in names) + "\n").encode()]
    chunk = max(1, min(nrows, (1 << 24) // max(per_row, 1)))
    out = np.empty(chunk * per_row, np.uint8)
    for i in range(0, nrows, chunk):
        k = fmt(np.ascontiguousarray(vals[:, i : i + chunk]), kinds, strtab, stroff, out)
        parts.append(out[:k].tobytes())
    return b"".join(parts)


def write_csv(columns, path: Path) -> None:
    atomic_write_bytes(path, csv_text(columns))


def write_json(obj: dict, path: Path) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")
