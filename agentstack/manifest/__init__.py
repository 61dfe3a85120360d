"""The manifest stage: `agentstack.toml` read, validated, viewed and edited."""
