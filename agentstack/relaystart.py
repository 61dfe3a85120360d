"""How `apply` renders every stdio server: `<python> -I -S <this file> --server NAME --project ROOT
--state DIR [--secret KEY=NAME]… -- CMD…` (the MCP relay: `agentstack.relayboot.start_main`).

`-S`: no `site`, whose `.pth` files (an editable install's import hook among them) cost more than
the relay's own work; the directory holding the `agentstack` package is appended to `sys.path`
(after the standard library: nothing shadows it), and the full path loads `site` when it needs
anything installed beside agentstack. `-I` keeps the environment and this file's directory out.

A server whose confinement is kept gets its child forked first (`serverbox.Forked.early`): it
loads the sandbox's code while the relay checks the trusted state, and runs nothing until the
relay sends it the confinement.
"""

import os
import sys

if __name__ == "__main__":
    sys.path.append(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    from agentstack.serverbox import Forked

    early = Forked.early(sys.argv[1:])
    from agentstack.relayboot import start_main

    start_main(sys.argv[1:], early)
