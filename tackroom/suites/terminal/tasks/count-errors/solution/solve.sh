#!/bin/bash
awk '$3 == "ERROR"' app.log | wc -l > errors.txt
