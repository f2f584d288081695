#!/bin/bash
# Verifier for csv-column-sum: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
[ "$(tr -d ' \n' < eu_total.txt)" = "3606.25" ]
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
