#!/bin/bash
# Verifier for permissions-fix: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
[ -x scripts/build.sh ] && [ -x scripts/deploy.sh ] || return 1
[ "$(stat -c %a secrets.txt)" = 600 ] || return 1
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
