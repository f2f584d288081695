#!/bin/bash
cd repo
printf '*.log\nbuild/\n' > .gitignore
git rm -q --cached *.log
git add .gitignore
git commit -qm "Ignore logs and build output"
