#!/bin/bash
grep -E '^[0-9-]+ 10:' app.log > window.log
