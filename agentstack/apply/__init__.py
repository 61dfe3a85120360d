"""The apply stage: native harness files written while a digest is trusted, and the checks that compare against them later (guard snapshot, shims, git hooks)."""
