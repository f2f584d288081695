#!/bin/bash
# Verifier for git-merge-feature: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
cd repo || return 1
[ "$(git branch --show-current)" = main ] || return 1
[ -f feature.txt ] || return 1
[ "$(git rev-list --parents -n1 HEAD | wc -w)" = 3 ] || return 1
git merge-base --is-ancestor feature main
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
