#!/bin/bash
awk '!seen[$0]++' contacts.csv > /tmp/c && cat /tmp/c > contacts.csv
