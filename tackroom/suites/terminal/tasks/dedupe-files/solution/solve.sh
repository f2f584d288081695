#!/bin/bash
cd docs
declare -A seen
for f in $(ls | LC_ALL=C sort); do
  h=$(sha256sum "$f" | cut -d' ' -f1)
  if [ -n "${seen[$h]}" ]; then rm -- "$f"; else seen[$h]=$f; fi
done
