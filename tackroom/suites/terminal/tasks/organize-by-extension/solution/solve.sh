#!/bin/bash
cd inbox
for f in *.*; do
  ext="${f##*.}"; mkdir -p "../$ext"; mv -- "$f" "../$ext/"
done
