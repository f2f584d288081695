#!/bin/bash
cd releases
latest=$(ls -d */ | tr -d / | grep -v '^current$' | sort -V | tail -1)
ln -sfn "$latest" current
