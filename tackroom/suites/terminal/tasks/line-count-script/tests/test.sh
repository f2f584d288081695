#!/bin/bash
# Verifier for line-count-script: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
printf 'a.txt 1\nb.txt 3\nempty.txt 0\n' > /tmp/want
diff counts.txt /tmp/want || return 1
mkdir -p /tmp/t && printf 'q\nr\n' > /tmp/t/z.txt && [ "$(./count_lines.sh /tmp/t)" = "z.txt 2" ]
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
