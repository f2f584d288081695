#!/bin/bash
# Verifier for word-frequency: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
printf 'the 6\nshall 5\nwe 5\nend 3\nfight 3\n' > /tmp/want
diff <(sed 's/[[:space:]]\+/ /g; s/ $//' top5.txt | sed '/^$/d') /tmp/want
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
