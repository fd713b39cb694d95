"""diffdsl: write a mathematical expression once in a `.dd` file; get its exact derivatives.

    prog = diffdsl.load("det3.dd")
    prog(A=x)          # value
"""

from .api import Program, compile, load
from .errors import (
    ArityError,
    AssignmentError,
    DDSyntaxError,
    DiffDSLError,
    IndexRangeError,
    InputError,
    RecursionLimitError,
    ShapeError,
    StaticValueError,
    TypeMismatchError,
    UnknownNameError,
    UsageError,
)
from .version import __version__

__all__ = [
    "Program", "compile", "load", "DiffDSLError", "DDSyntaxError", "UnknownNameError",
    "ArityError", "ShapeError", "StaticValueError", "IndexRangeError", "AssignmentError",
    "RecursionLimitError", "TypeMismatchError", "InputError", "UsageError", "__version__",
]
