"""`python -m agentstack`: the same as the `agentstack` command."""

from agentstack.entry import main

main()
