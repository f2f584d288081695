#!/bin/bash
# Verifier for normalize-markdown: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
! grep -rlq $'\r' --include='*.md' docs || return 1
! grep -rqE '[[:blank:]]$' --include='*.md' docs || return 1
[ "$(cat docs/a.md)" = "$(printf '# Title\ntext\n\nmore')" ] || return 1
grep -q $'\r' docs/keep.txt
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
