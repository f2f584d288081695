#!/bin/bash
# Verifier for sqlite-import-csv: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
python3 - <<'PY'
import sqlite3
c = sqlite3.connect("file:inventory.db?mode=ro", uri=True)
rows = sorted(c.execute("SELECT name, qty FROM items").fetchall())
assert rows == [("bolt", 120), ("hinge, large", 4), ("nut", 300), ("washer", 75)], rows
assert c.execute("SELECT typeof(qty) FROM items LIMIT 1").fetchone()[0] == "integer"
PY
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
