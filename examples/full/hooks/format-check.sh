#!/bin/sh
# PostToolUse hook for Edit|Write: the harness passes the tool call as JSON on stdin.
# This example only notes that it ran (on stderr) and never blocks: exit 0.
[ -t 0 ] || cat >/dev/null   # drain the JSON when piped; never wait on a terminal
echo "format-check: a file was edited; run your formatter before committing" >&2
exit 0
