#!/bin/bash
# Verifier for organize-by-extension: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
for f in txt/notes.txt txt/todo.txt "txt/Old Report.txt" csv/sales.csv csv/users.csv log/app.log; do
  [ -f "$f" ] || { echo "missing $f"; return 1; }
done
[ -d inbox ] || return 1
[ -z "$(ls -A inbox)" ] || { echo "inbox not empty"; return 1; }
grep -qx todo txt/todo.txt
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
