#!/bin/bash
# Verifier for extract-config-port: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
[ -f out/app/etc/config.ini ] || return 1
[ "$(tr -d ' \n' < port.txt)" = 8731 ]
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
