#!/bin/bash
# Verifier for log-time-window: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
[ -s window.log ] || return 1
diff window.log <(awk '$2 >= "10:00:00" && $2 <= "10:59:59"' app.log)
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
