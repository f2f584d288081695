#!/bin/bash
cd repo
c=$(git log --format=%H --grep='^release prep$')
git tag -a v1.0.0 -m "First release" "$c"
