"""Did-you-mean for a mistyped command or option: the closest known words (difflib), for any
command-line layer (`agentstack.cli._app` on typer)."""

from __future__ import annotations

from collections.abc import Iterable


def close_matches(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    import difflib

    # Compared without their leading dashes (shared by every option, they would make any two
    # options look alike).
    bare = {c.lstrip("-"): c for c in sorted(set(choices))}
    name = (word.split("=", 1)[0] if word.startswith("--") else word).lstrip("-")
    return [bare[m] for m in difflib.get_close_matches(name, list(bare), n=n, cutoff=0.6)]


def hint(word: str, choices: Iterable[str]) -> str:
    """"; did you mean 'x'?" (or "'x' or 'y'"), or "" when nothing is close."""
    found = close_matches(word, choices)
    if not found:
        return ""
    return "; did you mean " + " or ".join(f"'{m}'" for m in found) + "?"
