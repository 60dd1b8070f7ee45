"""Command line: ``servesim COMMAND``, one module per command in ``simulator/commands/`` (its
``add_parser`` declares its options, its ``main`` runs it). Bad input ends in one line,
``error: ...``, and exit code 2."""

from __future__ import annotations

import argparse
import os
import re
import sys

from simulator.commands import (
    bench,
    calibrate,
    check,
    compare,
    fields,
    gpus,
    parity,
    plan,
    plot,
    probe_host,
    report,
    run,
    scenarios,
    step_time,
    sweep,
    trace,
    validate,
)
from simulator.errors import ConfigError

# In the order `servesim --help` lists them.
COMMANDS = (
    run,
    scenarios,
    gpus,
    check,
    fields,
    step_time,
    sweep,
    plan,
    compare,
    bench,
    plot,
    report,
    calibrate,
    trace,
    validate,
    parity,
    probe_host,
)


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line: ``error: ...`` and exit code 2."""

    def error(self, message: str):
        m = re.match(r"argument [^:]+: (-.*)$", message)
        if m:  # a message of ours (``commands.args.number``): it names the option already
            self.exit(2, f"error: {m.group(1)}\n")
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("servesim")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        from simulator import __version__

        return __version__


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked for (importlib.metadata is
    slow to import, and every command builds the parser)."""

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(f"servesim {_version()}\n")
        parser.exit()


def parser() -> Parser:
    """servesim's argument parser: every command, every option with its help, units and default."""
    p = Parser(prog="servesim", description="Discrete-event simulator of LLM inference serving (vLLM V1 scheduling).")
    p.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    # The simulator does no large linear algebra: one BLAS thread (set before numpy loads) saves
    # the start-up of a thread pool per process, and sweep workers do not oversubscribe the cores.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return 0
    except OSError as e:  # a file that cannot be written or read mid-way: one line, no traceback
        print(f"error: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}", file=sys.stderr)
        return 2
