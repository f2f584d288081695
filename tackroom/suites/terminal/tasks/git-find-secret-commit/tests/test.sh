#!/bin/bash
# Verifier for git-find-secret-commit: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
want=$(cd repo && git log --format=%H --grep='add settings')
[ -n "$want" ] && [ "$(tr -d ' \n' < answer.txt)" = "$want" ]
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
