#!/bin/bash
chmod u+x scripts/*.sh
chmod 600 secrets.txt
