#!/bin/bash
# Verifier for csv-join: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
printf 'name,orders,amount\nadam,2,10.75\nliam,0,0.00\nmia,1,7.25\nzoe,2,10.00\n' > /tmp/want
diff <(tr -d '\r' < report.csv) /tmp/want
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
