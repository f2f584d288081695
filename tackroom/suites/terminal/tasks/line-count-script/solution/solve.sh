#!/bin/bash
cat > count_lines.sh <<'SH'
#!/bin/bash
cd "$1" || exit 1
for f in $(ls *.txt 2>/dev/null | LC_ALL=C sort); do
  echo "$f $(wc -l < "$f")"
done
SH
chmod +x count_lines.sh
./count_lines.sh texts > counts.txt
