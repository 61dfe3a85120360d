"""Start a program on a new pseudo-terminal (its controlling terminal) from a test.

`pty.fork()` in a pytest worker forks a process with threads (xdist's, the mock model's). The
child may then only make system calls until it execs: `os.environ.update()` there takes libc's
environment lock, which another thread may have held at the fork, and the child hangs for ever
(seen under load). So everything is computed before the fork, and the child only changes
directory and execs, with the environment handed to `execve`.
"""

from __future__ import annotations

import os
import pty
from collections.abc import Mapping, Sequence
from pathlib import Path


def pty_spawn(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | str,
              inherit: bool = True, unset: Sequence[str] = ()) -> tuple[int, int]:
    """(pid, master fd) of `argv` started on a new pty, in `cwd`, with the test's environment
    (when `inherit`) updated by `env`, less the names in `unset`."""
    full = dict(os.environ) if inherit else {}
    full.update(env)
    for name in unset:
        full.pop(name, None)
    program = os.fsencode(argv[0])
    args = [os.fsencode(a) for a in argv]
    environment = {os.fsencode(k): os.fsencode(v) for k, v in full.items()}
    directory = os.fsencode(str(cwd))
    pid, fd = pty.fork()
    if pid == 0:  # the child: system calls only, then exec
        try:
            os.chdir(directory)
            os.execve(program, args, environment)
        finally:
            os._exit(127)
    return pid, fd
