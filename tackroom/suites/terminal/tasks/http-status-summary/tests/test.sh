#!/bin/bash
# Verifier for http-status-summary: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
python3 - <<'PY'
import collections, csv
want = collections.Counter(line.split()[8] for line in open("access.log"))
rows = list(csv.reader(open("status.csv")))
assert rows[0] == ["status", "count"], rows[0]
assert rows[1:] == [[k, str(v)] for k, v in sorted(want.items())], rows
PY
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
