"""The surface stage: everything the targeted harnesses load from a project."""
