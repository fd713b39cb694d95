"""The `diffdsl` command line (docs/cli.md).

`main` turns every way a run can end into an exit status and a message, never a traceback;
`args` is the argument parser, `commands` a function per command, `specs` reads `--inputs`
values, `files` chunked `.npy` and Zarr files, `output` and `results` print what was asked.

May import: `api.py` and the report modules (`symbolic/report`, `symbolic/formulas`), and
the shared modules that know nothing of programs (errors, files, limits, progress, version,
datafiles). Whatever else it needs becomes part of the API.
"""

from .main import (
                   EXIT_INTERNAL,
                   EXIT_MISMATCH,
                   EXIT_OK,
                   EXIT_PIPE_CLOSED,
                   EXIT_USAGE,
                   build_parser,
                   cli_wording,
                   main,
                   run,
)

__all__ = ["EXIT_INTERNAL", "EXIT_MISMATCH", "EXIT_OK", "EXIT_PIPE_CLOSED", "EXIT_USAGE",
           "build_parser", "cli_wording", "main", "run"]
