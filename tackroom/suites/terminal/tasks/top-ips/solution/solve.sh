#!/bin/bash
awk '{print $1}' access.log | sort | uniq -c | sort -k1,1nr | head -3 | awk '{print $2, $1}' > top_ips.txt
