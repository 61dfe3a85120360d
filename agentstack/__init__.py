"""agentstack: a manifest-and-lockfile consent toolchain for AI coding-agent harnesses."""

__version__ = "0.1.0"
