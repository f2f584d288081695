#!/bin/bash
find docs -name '*.md' -exec sed -i 's/\r$//; s/[[:blank:]]*$//' {} +
