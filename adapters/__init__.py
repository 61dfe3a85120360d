"""Harness adapters: each turns the locked, trusted declaration into that harness's native files.

Installed as `agentstack_adapters` (a name no other distribution uses). Built-in adapters are listed
in `BUILTIN` (built from the harness descriptions, `agentstack.harnesses`: each names its adapter
class, checked against the `Adapter` protocol at import); third parties register through the
`agentstack.adapters` entry-point group, consulted only for names the built-ins do not have.
"""

from .base import (
    MEMBER,
    Adapter,
    FileOperation,
    KeyPath,
    OwnedBlock,
    OwnedKeys,
    RenderContext,
    WholeFile,
)
from .registry import BUILTIN, AdapterConflict, load_adapters

__all__ = [
    "BUILTIN",
    "MEMBER",
    "Adapter",
    "AdapterConflict",
    "FileOperation",
    "KeyPath",
    "OwnedBlock",
    "OwnedKeys",
    "RenderContext",
    "WholeFile",
    "load_adapters",
]
