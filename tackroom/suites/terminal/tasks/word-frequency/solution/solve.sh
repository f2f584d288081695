#!/bin/bash
tr 'A-Z' 'a-z' < speech.txt | grep -oE '[a-z]+' | sort | uniq -c | sort -k1,1nr -k2,2 | head -5 | awk '{print $2, $1}' > top5.txt
