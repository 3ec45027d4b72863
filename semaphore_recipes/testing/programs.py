"""The list of external programs, for the tests: it lives in
:mod:`semaphore_recipes.devtools.programs` (the server launchers beside it need it too)."""

from ..devtools.programs import (
    PROGRAMS,
    ExternalProgram,
    ProgramNotFound,
    Provider,
    find_optional_program,
    find_program,
)

__all__ = [
    "PROGRAMS",
    "ExternalProgram",
    "ProgramNotFound",
    "Provider",
    "find_optional_program",
    "find_program",
]
