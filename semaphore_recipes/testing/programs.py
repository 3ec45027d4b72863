"""The list of external programs, for the tests: it lives in :mod:`semaphore_recipes._programs`
(the server launchers of the runtime need it too)."""

from .._programs import (
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
