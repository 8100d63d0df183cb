#!/usr/bin/env bash
# Checks the commit convention (CONTRIBUTING.md) on every commit since the convention began:
# a subject of at most 72 characters that names its area ("pager: ..."), and a body on every
# commit that changes more than prose. Commits before FIRST are history and stay as they are.
# Usage: scripts/check-commits.sh [REV]   (default HEAD)
set -euo pipefail
cd "$(dirname "$0")/.."

# The last commit before the convention was written down.
FIRST=711367831656dcdebe548f779e5ea23e9518bb37
head=${1:-HEAD}

if ! git cat-file -e "$FIRST^{commit}" 2>/dev/null; then
    # A shallow clone without the start of the convention: check what it has.
    range=$head
    echo "check-commits: $FIRST is not in this clone; checking the commits it has"
else
    range="$FIRST..$head"
fi

# Paths that are prose or pictures only; a commit that changes nothing else needs no body.
prose='^(docs/.*|.*\.md|.*\.svg|.*\.png)$'

bad=0
checked=0
for c in $(git rev-list --no-merges "$range"); do
    checked=$((checked + 1))
    subject=$(git log -1 --format=%s "$c")
    body=$(git log -1 --format=%b "$c" | grep -v '^[[:space:]]*$' || true)
    short=$(git rev-parse --short "$c")
    if [ "${#subject}" -gt 72 ]; then
        echo "check-commits: $short: the subject runs to ${#subject} characters (at most 72): $subject"
        bad=1
    fi
    if ! [[ "$subject" =~ ^[a-z0-9][a-zA-Z0-9_./,+-]*(\ [a-zA-Z0-9_./,+-]+)*:\ [^[:space:]] ]]; then
        echo "check-commits: $short: the subject does not start with its area (\"pager: ...\"): $subject"
        bad=1
    fi
    code=$(git diff-tree --no-commit-id --name-only -r "$c" | grep -Ev "$prose" || true)
    if [ -n "$code" ] && [ -z "$body" ]; then
        echo "check-commits: $short: changes code ($(echo "$code" | head -1)...) and has no body saying why: $subject"
        bad=1
    fi
done
if [ "$bad" -ne 0 ]; then
    echo "check-commits: see CONTRIBUTING.md for the convention" >&2
    exit 1
fi
echo "check-commits: $checked commits follow the convention"
