#!/bin/bash
SRC=data
DEST=backup
mkdir -p "$DEST"
cp -r "$SRC"/. "$DST"/
