#!/bin/bash
# Verifier for batch-number-files: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
[ "$(cat scans/page_001.png)" = "page 1" ] && [ "$(cat scans/page_003.png)" = "page 3" ] && [ "$(cat scans/page_004.png)" = "page 10" ] && [ "$(cat scans/page_005.png)" = "page 11" ] || return 1
[ "$(ls scans | wc -l)" = 5 ]
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
