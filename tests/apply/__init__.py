"""Apply: rendering into each harness (adapters, goldens), links, speed, shims, git hooks, adopt, user level."""
