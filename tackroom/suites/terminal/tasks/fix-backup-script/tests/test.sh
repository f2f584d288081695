#!/bin/bash
# Verifier for fix-backup-script: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
[ -f backup/a.txt ] && [ -f backup/nested/b.txt ] || return 1
rm -rf backup && bash backup.sh >/dev/null 2>&1 && [ -f backup/nested/b.txt ]
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
