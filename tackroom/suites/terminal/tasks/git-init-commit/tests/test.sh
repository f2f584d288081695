#!/bin/bash
# Verifier for git-init-commit: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
cd project || return 1
[ "$(git log --format=%s)" = "Initial commit" ] || return 1
[ "$(git branch --show-current)" = main ] || return 1
[ -z "$(git status --porcelain)" ] && git ls-files | grep -qx src/main.py
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
