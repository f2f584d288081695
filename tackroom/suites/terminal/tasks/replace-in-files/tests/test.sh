#!/bin/bash
# Verifier for replace-in-files: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
! grep -rq foo_api --include='*.py' src || return 1
[ "$(grep -ro bar_api --include='*.py' src | wc -l)" = 4 ] || return 1
grep -q foo_api src/lib/data.json && grep -q 'renamed foo_api' CHANGELOG.md
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
