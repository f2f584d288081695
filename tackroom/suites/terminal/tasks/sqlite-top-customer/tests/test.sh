#!/bin/bash
# Verifier for sqlite-top-customer: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
[ "$(sed 's/[[:space:]]\+/ /g; s/ $//' answer.txt | head -1)" = "Grace 100.0" ]
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
