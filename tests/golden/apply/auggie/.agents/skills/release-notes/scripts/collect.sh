#!/bin/sh
# Print the last 20 commits of the repository we are in, one line each (read-only).
git log --oneline -n 20 2>/dev/null || echo "not a git repository"
