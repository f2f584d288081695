#!/bin/bash
# Verifier for dedupe-files: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
[ "$(ls docs | LC_ALL=C sort | tr '\n' ' ')" = "a.txt b.txt d.txt z.txt " ] || { ls docs; return 1; }
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
