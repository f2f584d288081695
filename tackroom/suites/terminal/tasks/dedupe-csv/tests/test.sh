#!/bin/bash
# Verifier for dedupe-csv: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
printf 'name,email\nann,ann@x.org\nbob,bob@x.org\ncid,cid@x.org\nbob,bob@y.org\n' > /tmp/want
diff contacts.csv /tmp/want
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
