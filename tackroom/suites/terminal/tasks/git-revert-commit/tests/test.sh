#!/bin/bash
# Verifier for git-revert-commit: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
cd repo || return 1
[ "$(git rev-list --count HEAD)" = 4 ] || return 1
[ "$(cat config.yml)" = "$(printf 'mode: safe\nretries: 3')" ] || return 1
git log --format=%s | grep -q 'tune config' && [ -f README.md ]
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
