#!/bin/bash
cd repo
git revert --no-edit HEAD
