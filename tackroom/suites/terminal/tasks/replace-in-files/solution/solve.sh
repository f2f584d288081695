#!/bin/bash
find src -name '*.py' -exec sed -i 's/foo_api/bar_api/g' {} +
