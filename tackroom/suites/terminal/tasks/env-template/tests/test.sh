#!/bin/bash
# Verifier for env-template: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
printf 'DB_HOST=db.internal\nDB_PORT=6543\nURL=https://db.internal:6543/app\n' > /tmp/want
diff app.env /tmp/want
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
