"""diffdsl: write a mathematical expression once in a `.dd` file; get its exact derivatives.

    prog = diffdsl.load("det3.dd")
    prog(A=x)          # value
"""

from . import limits
from .api import Program, cache_clear, cache_info, compile, load
from .errors import (
    ArityError,
    AssignmentError,
    DDSyntaxError,
    DiffDSLError,
    IndexRangeError,
    InputError,
    LimitError,
    RecursionLimitError,
    ShapeError,
    StaticValueError,
    TypeMismatchError,
    UnknownNameError,
    UsageError,
)
from .progress import set_quiet
from .version import __version__

__all__ = [
    "Program", "compile", "load", "cache_info", "cache_clear", "DiffDSLError", "DDSyntaxError",
    "UnknownNameError", "ArityError", "ShapeError", "StaticValueError", "IndexRangeError",
    "AssignmentError", "RecursionLimitError", "TypeMismatchError", "InputError", "UsageError",
    "LimitError", "limits", "set_quiet", "__version__",
]
