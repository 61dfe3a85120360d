"""Make untrusted strings safe to show on a terminal (the display rules of docs/trust.md).

Manifest content is attacker-controlled: a bidi override can make `rm -rf ~` read as something
harmless, an OSC sequence can rewrite the terminal title or a hyperlink, rich markup can restyle the
review. Every such character is shown as a visible `\\uXXXX` escape instead.
"""

from __future__ import annotations

import re
import unicodedata

# Cc control, Cf format (zero-width, bidi controls), Co private use, Cn unassigned, Cs surrogates,
# Zl/Zp line and paragraph separators.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp"})
_IDENTIFIER = re.compile(r"^[a-z0-9._-]{1,64}$")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def sanitize(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every control, format, private-use, unassigned or separator character escaped."""
    out = []
    for char in text:
        if keep_newlines and char == "\n":
            out.append(char)
        elif unicodedata.category(char) in _UNSAFE_CATEGORIES:
            out.append(_escape(char))
        else:
            out.append(char)
    return "".join(out)


def identifier(text: str) -> str:
    """An item name for display: ASCII `[a-z0-9._-]` as it is, anything else fully escaped."""
    if _IDENTIFIER.match(text):
        return text
    return "".join(c if c.isascii() and c.isalnum() else _escape(c) for c in text)
