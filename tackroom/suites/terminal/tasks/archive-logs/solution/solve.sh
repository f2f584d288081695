#!/bin/bash
find logs -name '*.log' | LC_ALL=C sort > /tmp/list
tar -czf logs.tar.gz -T /tmp/list
xargs rm -- < /tmp/list
