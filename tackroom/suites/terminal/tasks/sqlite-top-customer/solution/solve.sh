#!/bin/bash
python3 - <<'PY'
import sqlite3
c = sqlite3.connect("shop.db")
name, total = c.execute("SELECT c.name, SUM(o.total) t FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.id ORDER BY t DESC LIMIT 1").fetchone()
open("answer.txt", "w").write(f"{name} {total:.1f}\n")
PY
