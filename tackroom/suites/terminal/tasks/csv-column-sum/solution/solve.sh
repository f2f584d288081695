#!/bin/bash
awk -F, 'NR > 1 && $2 == "EU" {s += $4} END {printf "%.2f\n", s}' sales.csv > eu_total.txt
