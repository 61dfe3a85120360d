"""The lock stage: every byte the manifest refers to, resolved and pinned."""
