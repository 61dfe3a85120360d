#!/bin/sh
# Create a local git repository holding the `style-guide` skill, tagged v1.0.0, and declare
# it in this example's agentstack.toml as a git-sourced skill.
#
#   ./make-skill-repo.sh [DIR]      DIR defaults to $PWD/.skill-repo
#
# A TOML manifest cannot compute the absolute file:// URL of a directory on your machine,
# so this script appends the [skills.style-guide] table itself, once.
# Idempotent: when DIR already holds the tagged repository it is left as is, and the table
# is not appended twice. Prints the repository's path, then its file:// URL.
# Never touches your git configuration: the commit's identity is passed with `-c`.
set -eu

here=$(cd "$(dirname "$0")" && pwd -P)
manifest="$here/agentstack.toml"
repo=${1:-"$PWD/.skill-repo"}
tag=v1.0.0

die() {
    echo "make-skill-repo: $*" >&2
    exit 1
}

[ -f "$manifest" ] || die "no agentstack.toml next to this script ($manifest)"

mkdir -p "$repo"
repo=$(cd "$repo" && pwd -P)
case $repo in
    *'"'* | *\\* | *'
'*) die "the path $repo cannot be written into a TOML string; choose another DIR" ;;
esac
url="file://$repo"

# Plain git with only what this script asks for: identity, no signing, no user hooks, a
# fixed date (so the commit id is the same on every machine), and `--git-dir` so that a
# parent repository can never answer for this one.
g() {
    GIT_AUTHOR_DATE="2025-01-01T00:00:00Z" GIT_COMMITTER_DATE="2025-01-01T00:00:00Z" \
        git --git-dir="$repo/.git" --work-tree="$repo" \
        -c user.name="agentstack example" -c user.email="example@agentstack.invalid" \
        -c commit.gpgSign=false -c tag.gpgSign=false -c core.hooksPath=/dev/null \
        -c core.autocrlf=false "$@"
}

if [ -d "$repo/.git" ] && g rev-parse -q --verify "refs/tags/$tag^{commit}" >/dev/null; then
    echo "make-skill-repo: $repo already holds $tag; leaving it as is" >&2
elif [ -n "$(ls -A "$repo")" ]; then
    die "$repo exists, is not empty and holds no $tag tag; remove it or pass another DIR"
else
    mkdir -p "$repo/skills/style-guide"
    cat >"$repo/skills/style-guide/SKILL.md" <<'SKILL'
---
name: style-guide
description: The team's writing and code style rules. Use when writing or reviewing documentation, comments, commit messages or user-facing text.
---

# Style guide

- Write in plain, direct sentences; prefer the active voice.
- Name things for what they are, not how they are implemented.
- Comments explain *why*; the code already says *what*.
- Commit subject lines: imperative mood, under 72 characters, no trailing period.
- Error messages say what went wrong and what to do next.
SKILL
    git -c init.defaultBranch=main init -q "$repo"
    g symbolic-ref HEAD refs/heads/main
    g add skills/style-guide/SKILL.md
    g commit -q -m "Add the style-guide skill"
    g tag "$tag"
    echo "make-skill-repo: created $repo with tag $tag" >&2
fi

if grep -q '^\[skills\.style-guide\]' "$manifest"; then
    echo "make-skill-repo: $manifest already declares [skills.style-guide]" >&2
else
    printf '\n# Git-sourced skill, appended by make-skill-repo.sh.\n[skills.style-guide]\ngit = "%s"\nrev = "%s"\nsubdir = "skills/style-guide"\n' \
        "$url" "$tag" >>"$manifest"
    echo "make-skill-repo: declared [skills.style-guide] in $manifest" >&2
fi

echo "$repo"
echo "$url"
