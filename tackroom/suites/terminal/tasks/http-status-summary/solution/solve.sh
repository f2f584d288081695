#!/bin/bash
{ echo status,count; awk '{print $9}' access.log | sort | uniq -c | sort -k2,2 | awk '{print $2","$1}'; } > status.csv
