#!/bin/bash
# Verifier for rename-lowercase: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
[ "$(ls photos | LC_ALL=C sort | tr '\n' ' ')" = "already_ok.gif beach_day.jpg city_at_night.jpeg mountain.png " ] || { ls photos; return 1; }
grep -qx beach photos/beach_day.jpg && grep -qx city photos/city_at_night.jpeg
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
