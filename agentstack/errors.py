"""One root error type; the CLI catches it once and maps it to the documented exit code.

Exit codes (README.md, "Exit codes"): 0 done, 1 refused / does not hold, 2 usage or invalid input,
3 internal error (a bug).
"""

from __future__ import annotations

from collections import namedtuple

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_INVALID = 2
EXIT_INTERNAL = 3

TYPE_CHECKING = False  # `typing` is not imported at run time: every command imports this module
if TYPE_CHECKING:
    from typing import NamedTuple

    class _Problem(NamedTuple):
        file: str
        path: str
        message: str
        hint: str = ""
else:
    _Problem = namedtuple("Problem", ("file", "path", "message", "hint"), defaults=("",))


class Problem(_Problem):
    """One bad field of one input file, addressed by a dotted path (`servers.github.args[2]`).

    (A named tuple, not a dataclass: every command imports this module, and `dataclasses` pulls in
    `inspect`, which costs more than the interpreter's own start-up; and not `typing.NamedTuple`,
    which imports `typing`.)"""

    __slots__ = ()

    def render(self) -> str:
        where = f"{self.file}: {self.path}" if self.path else self.file
        text = f"{where}: {self.message}"
        if self.hint:
            text += f" (hint: {self.hint})"
        return text


class AgentstackError(Exception):
    """Root of every error agentstack reports to a user."""

    exit_code: int = EXIT_REFUSED

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def diagnostics(self) -> list[str]:
        lines = [self.message]
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return lines


class Refused(AgentstackError):
    """The command ran but what it checks does not hold (exit 1)."""

    exit_code = EXIT_REFUSED


class InvalidInput(AgentstackError):
    """Usage error or input that does not validate (exit 2)."""

    exit_code = EXIT_INVALID


class ManifestInvalid(InvalidInput):
    """Every problem found in one pass; nothing is written when this is raised."""

    def __init__(self, problems: list[Problem]) -> None:
        count = len(problems)
        super().__init__(f"{count} problem{'s' if count != 1 else ''} found; nothing was written")
        self.problems = problems

    def diagnostics(self) -> list[str]:
        return [self.message, *(f"  - {p.render()}" for p in self.problems)]


class StaleLock(Refused):
    """agentstack.lock does not match the manifest or the files it pins."""


class TreeHashError(InvalidInput):
    """A local tree cannot be hashed safely (escaping link, device, FIFO, bad name, collision)."""
