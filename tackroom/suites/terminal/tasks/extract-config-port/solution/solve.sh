#!/bin/bash
mkdir -p out && tar -xzf bundle.tar.gz -C out
grep -E '^port' "$(find out -name config.ini)" | sed 's/.*= *//' > port.txt
