"""The lock: resolution, tree hashes, git sources, code roots, re-lock and its limits."""
