#!/bin/bash
# Verifier for ini-edit: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
python3 - <<'PY'
import configparser
c = configparser.ConfigParser()
c.read("settings.ini")
assert c["database"]["port"] == "5433"
assert c["server"]["port"] == "8080"
assert c["database"]["name"] == "app"
assert c["cache"]["enabled"] == "true"
assert open("settings.ini").read().startswith("; service settings\n[server]\n")
PY
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
