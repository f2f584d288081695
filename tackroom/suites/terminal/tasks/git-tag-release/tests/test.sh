#!/bin/bash
# Verifier for git-tag-release: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
cd repo || return 1
[ "$(git cat-file -t v1.0.0)" = tag ] || return 1
[ "$(git log -1 --format=%s 'v1.0.0^{commit}')" = "release prep" ] || return 1
[ "$(git tag -l --format='%(contents:subject)' v1.0.0)" = "First release" ]
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
