#!/bin/bash
python3 - <<'PY'
import csv
users = {r["id"]: r["name"] for r in csv.DictReader(open("users.csv"))}
agg = {u: [0, 0.0] for u in users}
for r in csv.DictReader(open("orders.csv")):
    agg[r["user_id"]][0] += 1
    agg[r["user_id"]][1] += float(r["amount"])
with open("report.csv", "w") as f:
    f.write("name,orders,amount\n")
    for uid, name in sorted(users.items(), key=lambda kv: kv[1]):
        f.write(f"{name},{agg[uid][0]},{agg[uid][1]:.2f}\n")
PY
