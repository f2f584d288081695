#!/bin/bash
python3 - <<'PY'
src = open("stats.py").read()
src = src.replace("    return s[len(s) // 2]\n", "    n = len(s)\n    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n")
open("stats.py", "w").write(src)
PY
