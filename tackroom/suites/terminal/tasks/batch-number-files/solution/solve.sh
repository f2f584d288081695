#!/bin/bash
cd scans
i=1
for f in $(ls *.png | sort -V); do
  mv -- "$f" "tmp_$(printf %03d $i).png"; i=$((i + 1))
done
for f in tmp_*.png; do mv -- "$f" "page_${f#tmp_}"; done
