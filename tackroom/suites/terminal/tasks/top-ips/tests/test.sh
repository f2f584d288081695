#!/bin/bash
# Verifier for top-ips: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
printf '192.168.1.7 12\n10.0.0.1 9\n10.0.0.3 6\n' > /tmp/want
diff <(sed 's/[[:space:]]\+/ /g; s/^ //; s/ $//' top_ips.txt | sed '/^$/d') /tmp/want
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
