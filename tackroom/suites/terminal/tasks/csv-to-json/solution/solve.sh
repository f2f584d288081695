#!/bin/bash
python3 - <<'PY'
import csv, json
rows = [dict(r, age=int(r["age"])) for r in csv.DictReader(open("people.csv"))]
json.dump(rows, open("people.json", "w"), indent=2)
PY
