#!/bin/bash
# Verifier for greet-script: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
[ -x greet.sh ] || return 1
[ "$(./greet.sh Ada)" = "Hello, Ada!" ] && [ "$(./greet.sh)" = "Hello, World!" ] && [ "$(./greet.sh 'Grace Hopper')" = "Hello, Grace Hopper!" ]
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
