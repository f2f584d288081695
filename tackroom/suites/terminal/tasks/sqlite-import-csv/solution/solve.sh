#!/bin/bash
python3 - <<'PY'
import csv, sqlite3
c = sqlite3.connect("inventory.db")
c.execute("CREATE TABLE items(name TEXT, qty INTEGER)")
c.executemany("INSERT INTO items VALUES (?, ?)", [(r["name"], int(r["qty"])) for r in csv.DictReader(open("items.csv"))])
c.commit()
PY
