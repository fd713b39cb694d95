"""The `diffdsl` command line (INTERFACE.md): parses the arguments (args.py), runs the
command (commands.py, which calls the API and prints through the report modules) and turns
every way it can end into an exit status and a message, never a traceback."""

from __future__ import annotations

import os
import re
import sys
import warnings

from .. import limits, progress
from ..errors import DiffDSLError
from .args import build_parser, file_after_options, limits_of
from .commands import COMMANDS, EXIT_MISMATCH, EXIT_OK
from .output import StdoutFailed, guarded_stdout

__all__ = ["EXIT_INTERNAL", "EXIT_MISMATCH", "EXIT_OK", "EXIT_PIPE_CLOSED", "EXIT_USAGE",
           "build_parser", "cli_wording", "main", "run"]

EXIT_USAGE, EXIT_INTERNAL = 2, 3

# The status of a process ended by SIGPIPE (128 + 13), what `cat big | head` leaves for `cat`.
EXIT_PIPE_CLOSED = 141


# Errors are worded for Python (argument names); on the command line they name the flags.
_CLI_WORDS = [(re.compile(r"\bof=NAME\b"), "--of NAME"),
              (re.compile(r"\bas NAME=VALUE\b"), "with --inputs NAME=VALUE"),
              (re.compile(r"limits=\{'(\w+)': N\}"), r"--limit \1=N")]


def cli_wording(text: str) -> str:
    for pattern, words in _CLI_WORDS:
        text = pattern.sub(words, text)
    return text


def main(argv: list[str] | None = None) -> int:
    try:
        # A reader that went away, or a full disk behind stdout, shows by the block's end
        # (it flushes stdout), inside the handlers below.
        with guarded_stdout():
            return run(argv)
    except BrokenPipeError:
        return _reader_gone()
    except DiffDSLError as exc:
        print(cli_wording(str(exc)), file=sys.stderr)
        if isinstance(exc, StdoutFailed):
            _reader_gone()  # what stdout still buffers goes nowhere, quietly
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("diffdsl: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("diffdsl: error: out of memory", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # a bug in diffdsl: say so plainly rather than dump a traceback
        print(f"diffdsl: internal error: {type(exc).__name__}: {exc}\n"
              "    please report this with the .dd file and the command", file=sys.stderr)
        return EXIT_INTERNAL


def _reader_gone() -> int:
    """stdout's reader went away (`diffdsl eval ... | head`): stop quietly, as a Unix tool
    ended by SIGPIPE does. stdout goes to /dev/null so that Python's flush at exit is quiet
    (also where stdout cannot be written: `guarded_stdout`)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor behind stdout: nothing to flush
        pass
    return EXIT_PIPE_CLOSED


def run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    file_after_options(args)
    with warnings.catch_warnings(), limits.using(**limits_of(args)), \
            progress.quiet_if(args.quiet):
        warnings.showwarning = _plain_warning
        return COMMANDS[args.command](args)


def _plain_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """One `diffdsl: warning: ...` line, not Python's format with our source path."""
    print(f"diffdsl: warning: {message}", file=sys.stderr)
