#!/bin/bash
# Verifier for archive-logs: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
[ -f logs.tar.gz ] || return 1
[ "$(tar -tzf logs.tar.gz | grep -v '/$' | LC_ALL=C sort | tr '\n' ' ')" = "logs/app.log logs/db.log logs/old/worker.log " ] || { tar -tzf logs.tar.gz; return 1; }
[ -z "$(find logs -name '*.log')" ] || return 1
[ -f logs/keep.conf ]
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
