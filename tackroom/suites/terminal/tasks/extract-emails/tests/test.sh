#!/bin/bash
# Verifier for extract-emails: writes 1 to /logs/verifier/reward.txt when every check passes, else 0.
check() {
printf 'alice.smith@example.com\nbob@test.org\ncarol_99@mail.example.net\neve+news@corp.io\n' > /tmp/want
diff emails.txt /tmp/want
}
if check; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
