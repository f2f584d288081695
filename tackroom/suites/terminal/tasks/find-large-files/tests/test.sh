#!/bin/bash
# Verifier for find-large-files: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
printf 'data/a/b/huge.img\ndata/a/big1.bin\ndata/c/big2.dat\n' > /tmp/want
diff <(sed '/^$/d' large.txt) /tmp/want
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
