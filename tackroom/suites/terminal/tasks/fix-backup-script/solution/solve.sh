#!/bin/bash
sed -i 's/\$DST/$DEST/' backup.sh
bash backup.sh
