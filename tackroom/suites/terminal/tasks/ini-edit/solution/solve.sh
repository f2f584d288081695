#!/bin/bash
sed -i '/^\[database\]/,/^\[/ s/^port = .*/port = 5433/' settings.ini
printf '\n[cache]\nenabled = true\n' >> settings.ini
