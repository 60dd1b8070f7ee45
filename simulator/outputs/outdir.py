"""Where results go: output paths checked before any work, one writer per folder, and a folder that
holds what its latest run wrote and nothing else.

- ``check_folder`` / ``check_file``: an output folder or file that cannot be written (a file where
  a folder is wanted, a folder under a file, no permission) is refused with one line before any
  simulation; ``named_output`` sends an output given as a bare file name under a results folder.
- Only ordinary files and folders are written (``writers.refuse_special``): an output path that is a
  symbolic link, a device, a named pipe or a socket is refused by the checks above, and by every
  writer again as it writes.
- ``folder_name``: a scenario name as a folder name that stays inside its parent.
- ``Writing(folder, flag)``: the lock a run, sweep or plan holds on its folder while it writes there
  (``.servesim.lock``, with the writer's pid). A second writer is refused with one line naming the
  first; the kernel drops the lock of a process that ends, however it ends, so a crashed writer
  leaves nothing stuck. A folder inside one being written is refused too.
- ``Outputs(folder, names, flag, kind)``: what the folder's latest writer wrote (``.servesim.json``);
  once a new run has written its files, what the earlier one wrote and this one did not is removed;
  a file this one would overwrite that servesim did not write, or another kind's results (a sweep
  where a run is asked for), are refused before any work.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
from pathlib import Path

from simulator.errors import ConfigError
from simulator.outputs.writers import atomic_write_text, refuse_special

RESULTS = Path("results")
LOCK = ".servesim.lock"
MANIFEST = ".servesim.json"
NAME_MAX = 100  # characters of a folder made from a name (file systems allow 255 bytes)


# ---- paths ----------------------------------------------------------------------------------------


def named_output(text: str, folder: Path) -> Path:
    """An output path as given, or under ``folder`` when it is a bare file name (no folder part,
    not even ``./``): outputs land beside the results, not wherever the command is run."""
    if "/" in text or (os.altsep and os.altsep in text) or text.startswith("~"):
        return Path(text).expanduser()
    return folder / text


def _existing_ancestor(p: Path) -> Path:
    p = Path(os.path.abspath(p))
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def check_folder(path: Path, flag: str) -> None:
    """``path`` is a folder servesim can make (or has) and write in; else one line naming ``flag``."""
    p = Path(path)
    refuse_special(p, flag)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{flag} {path}: a file, not a folder; give a folder for the results")
    a = _existing_ancestor(p)
    if not a.is_dir():
        raise ConfigError(f"{flag} {path}: {a} is a file, not a folder, so nothing can be written under it")
    if not _writable(a):
        raise ConfigError(f"{flag} {path}: cannot write in {a} (permission denied)")


def check_file(path: Path, flag: str) -> None:
    """``path`` is a file servesim can write (its folder made if need be); else one line naming ``flag``."""
    p = Path(path)
    refuse_special(p, flag)
    if p.is_dir():
        raise ConfigError(f"{flag} {path}: a folder, not a file; give a file name")
    if p.exists() and not os.access(p, os.W_OK):
        raise ConfigError(f"{flag} {path}: cannot overwrite it (permission denied)")
    a = _existing_ancestor(p.parent)
    if not a.is_dir():
        raise ConfigError(f"{flag} {path}: {a} is a file, not a folder, so nothing can be written under it")
    if not _writable(a):
        raise ConfigError(f"{flag} {path}: cannot write in {a} (permission denied)")


_UNSAFE = re.compile(r"[\x00-\x1f\x7f]")


def folder_name(name: str) -> str:
    """``name`` as one folder name inside its parent: path separators split it, ``.`` and ``..``
    parts and leading dots go, control characters become ``_``; at most ``NAME_MAX`` characters."""
    parts = [q for q in re.split(r"[/\\]", _UNSAFE.sub("_", name)) if q.strip(" .")]
    out = "_".join(q.strip() for q in parts).lstrip(".")
    return out[:NAME_MAX].rstrip(" .") or "scenario"


# ---- one writer per folder ------------------------------------------------------------------------


class Writing:
    """Hold ``folder``'s lock while writing there (see the module docstring): made if need be (and
    removed again if it was new and nothing was written), refused with one line if another live
    servesim process writes there or in a folder around it."""

    def __init__(self, folder: Path, flag: str) -> None:
        self.folder, self.flag = Path(folder), flag
        self.fd = -1
        self.made = False

    def __enter__(self) -> Writing:
        check_folder(self.folder, self.flag)
        for up in list(Path(os.path.abspath(self.folder)).parents):
            who = _held_by(up / LOCK)
            if who is not None:
                raise ConfigError(
                    f"{self.flag} {self.folder}: inside {up}, which {who} is writing; wait for it to "
                    "finish or give another folder"
                )
        self.made = not self.folder.exists()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"{self.flag} {self.folder}: cannot make the folder ({e.strerror})") from None
        self.fd = _acquire(self.folder / LOCK, self.flag, self.folder)
        return self

    def __exit__(self, *exc) -> None:
        lock = self.folder / LOCK
        try:
            if _same_file(self.fd, lock):
                lock.unlink()
        finally:
            os.close(self.fd)
            self.fd = -1
        if self.made:
            with contextlib.suppress(OSError):  # removed only if nothing was written in it
                self.folder.rmdir()


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _acquire(lock: Path, flag: str, folder: Path) -> int:
    refuse_special(lock, flag)
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as e:
            raise ConfigError(f"{flag} {folder}: cannot write in the folder ({e.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigError(
                f"{flag} {folder}: {_writer(lock)} is writing there now; wait for it to finish or give another folder"
            ) from None
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            # No locks on this file system: a lock file whose writer still runs is the lock.
            pid = _pid(lock)
            if pid and pid != os.getpid() and _alive(pid):
                os.close(fd)
                raise ConfigError(
                    f"{flag} {folder}: servesim (pid {pid}) is writing there now; wait for it to "
                    "finish or give another folder"
                ) from None
        if _same_file(fd, lock):  # not a lock file that its last holder removed meanwhile
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _pid(lock: Path) -> int:
    try:
        text = lock.read_text().split()
        return int(text[0]) if text else 0
    except (OSError, ValueError):
        return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _writer(lock: Path) -> str:
    pid = _pid(lock)
    return f"servesim (pid {pid})" if pid else "another servesim process"


def _held_by(lock: Path) -> str | None:
    """Who holds ``lock`` now (None: nobody, or no such file)."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _writer(lock)
    except OSError:
        return None
    finally:
        os.close(fd)  # closing drops the shared lock taken to look
    return None


# ---- what a folder holds --------------------------------------------------------------------------

# What each kind of writer is called, and what writers of earlier versions left (before folders had
# a record), by the file that marks each kind.
KINDS = {"run": "run", "runs": "folder of runs", "sweep": "sweep", "plan": "plan", "compare": "comparison"}
_LEGACY = {
    "run": (
        "summary.json",
        (
            "summary.json",
            "requests.csv",
            "steps.csv",
            "scenario.yaml",
            "kv_cache_usage.png",
            "throughput.png",
            "metrics.openmetrics",
        ),
    ),
    "sweep": (
        "sweep.csv",
        ("sweep.csv", "recommendation.json", "kv_cache_usage.png", "throughput.png", "metrics_vs_knob.png", "points"),
    ),
    "plan": (
        "plan.csv",
        ("plan.csv", "recommendation.json", "probes.csv", "plan_cost.png", "latency_vs_rate.png", "candidates"),
    ),
    "compare": ("comparison.csv", ("comparison.csv", "kv_cache_usage.png", "throughput.png")),
}


def check_names(folder: Path, names, flag: str) -> None:
    """Each of ``names`` in ``folder`` is missing, an ordinary file or a folder; else one line naming ``flag``."""
    for n in dict.fromkeys(names):
        refuse_special(Path(folder) / n, flag)


class Outputs:
    """What a writer of ``kind`` (see ``KINDS``) may put in ``folder`` (``names``: its files and
    sub-folders, plain names), checked against what is there before any work: a folder holding
    another kind's results (a run where a sweep is asked for) or files servesim did not write is
    refused. ``done(wrote)`` records what it wrote and removes what the folder's earlier writer of
    the same kind wrote and this one did not."""

    def __init__(self, folder: Path, names: list[str], flag: str, kind: str = "run") -> None:
        self.folder, self.kind = Path(folder), kind
        before_kind, self.before = self._recorded()
        present = sorted(n for n in self.before if (self.folder / n).exists())
        if before_kind != kind and present:
            raise ConfigError(
                f"{flag} {folder}: holds a {KINDS.get(before_kind, before_kind)} ({', '.join(present[:4])}"
                f"{', ...' if len(present) > 4 else ''}), not a {KINDS[kind]}'s results; give another "
                "folder (nothing was written)"
            )
        check_names(self.folder, [*names, MANIFEST, LOCK], flag)
        theirs = [n for n in dict.fromkeys(names) if self._foreign(n)]
        if theirs:
            raise ConfigError(
                f"{flag} {folder}: holds {', '.join(theirs)} that servesim did not write; give a new or "
                "empty folder (nothing was written)"
            )

    def _recorded(self) -> tuple[str, set[str]]:
        """The kind of the folder's last writer, and what it wrote."""
        try:
            doc = json.loads((self.folder / MANIFEST).read_text())
            return str(doc["kind"]), {n for n in doc["wrote"] if isinstance(n, str) and _plain(n)}
        except (OSError, ValueError, KeyError, TypeError):
            pass
        for kind, (mark, names) in _LEGACY.items():
            if (self.folder / mark).is_file():
                runs = any((d / "summary.json").is_file() for d in self.folder.iterdir() if d.is_dir())
                return ("runs" if kind == "compare" and runs else kind), set(names)
        return self.kind, set()

    def _foreign(self, name: str) -> bool:
        p = self.folder / name
        if name in self.before or not (p.exists() or p.is_symlink()):
            return False
        return not (p.is_dir() and ((p / MANIFEST).is_file() or (p / "summary.json").is_file()))

    def done(self, wrote: list) -> list[str]:
        """Record ``wrote`` (paths in the folder, or names) and remove the rest of the earlier run;
        returns what was removed."""
        names = list(dict.fromkeys(Path(w).name for w in wrote if Path(w).parent in (self.folder, Path("."))))
        removed = []
        for n in sorted(self.before - set(names)):
            p = self.folder / n
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists() or p.is_symlink():
                p.unlink()
            else:
                continue
            removed.append(n)
        if names or self.before:  # a writer that wrote nothing (every run failed) leaves no record either
            atomic_write_text(self.folder / MANIFEST, json.dumps({"kind": self.kind, "wrote": names}) + "\n")
        return removed


def _plain(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name and not name.startswith(".")
