#!/bin/bash
# Verifier for git-ignore-logs: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
cd repo || return 1
[ -f run.log ] && [ -f debug.log ] || return 1
[ -z "$(git ls-files '*.log')" ] || return 1
git check-ignore -q build/app && git check-ignore -q new.log || return 1
git ls-files | grep -qx .gitignore && [ -z "$(git status --porcelain)" ] && [ "$(git rev-list --count HEAD)" = 2 ]
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
