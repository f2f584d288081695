#!/bin/bash
# Verifier for fix-python-bug: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
python3 - <<'PY'
from stats import mean, median
assert mean([1, 2, 3]) == 2
assert median([3, 1, 2]) == 2
assert median([4, 1, 3, 2]) == 2.5
assert median([10, 20]) == 15
assert median([1, 2, 3, 4, 5, 6]) == 3.5
PY
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
