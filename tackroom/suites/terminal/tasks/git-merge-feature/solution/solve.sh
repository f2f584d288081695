#!/bin/bash
cd repo
git checkout -q main
git merge -q --no-ff feature -m "Merge branch feature"
