#!/bin/bash
# Verifier for csv-to-json: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
python3 - <<'PY'
import json
data = json.load(open("people.json"))
assert data == [
    {"name": "Ada", "age": 36, "city": "London"},
    {"name": "Linus", "age": 28, "city": "Helsinki"},
    {"name": "Grace, Rear Adm.", "age": 85, "city": "New York"},
], data
PY
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
