#!/bin/bash
python3 - <<'PY'
import json
def merge(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(a[k], v) if isinstance(a.get(k), dict) and isinstance(v, dict) else v
    return out
json.dump(merge(json.load(open("defaults.json")), json.load(open("overrides.json"))), open("merged.json", "w"), indent=2)
PY
