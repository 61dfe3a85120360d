"""`python -m agentstack`: the same as the `agentstack` command."""

from agentstack.cli import main

main()
