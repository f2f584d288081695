#!/bin/bash
# Verifier for json-merge: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
python3 - <<'PY'
import json
got = json.load(open("merged.json"))
assert got == {"name": "svc", "port": 8080, "debug": False, "tags": ["b", "c"],
               "db": {"host": "db.prod", "port": 5432, "opts": {"ssl": True, "pool": 5}}}, got
PY
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
