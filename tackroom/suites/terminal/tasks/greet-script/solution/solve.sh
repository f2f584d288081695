#!/bin/bash
cat > greet.sh <<'SH'
#!/bin/bash
echo "Hello, ${1:-World}!"
SH
chmod +x greet.sh
