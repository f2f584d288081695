#!/bin/bash
git -C repo log -S SECRET_TOKEN --format=%H --reverse | head -1 > answer.txt
