#!/bin/bash
# Verifier for count-errors: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
[ "$(tr -d ' \n' < errors.txt)" = 12 ]
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
