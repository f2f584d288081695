#!/bin/bash
# Verifier for symlink-latest: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
[ -L releases/current ] || return 1
[ "$(cat releases/current/VERSION)" = 1.10.0 ] || return 1
case "$(readlink releases/current)" in /*) return 1;; esac
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
