#!/bin/bash
# Verifier for json-filter: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
python3 - <<'PY'
import json
orders = json.load(open("orders.json"))
want = sorted((o for o in orders if o["status"] == "active"), key=lambda o: o["id"])
got = json.load(open("active_orders.json"))
assert got == want and want, got
PY
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
