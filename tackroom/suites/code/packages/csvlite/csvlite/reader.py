"""Reading CSV text: comma-separated fields, double quotes around fields that need them."""


def parse_line(line):
    """Split one CSV line into fields.

    A quoted field may hold commas, and a doubled quote ``""`` inside it
    stands for one ``"``.
    """
    fields = []
    field = []
    quoted = False
    i = 0
    while i < len(line):
        ch = line[i]
        if quoted:
            if ch == '"':
                if i + 1 < len(line) and line[i + 1] == '"':
                    field.append('"')
                    i += 1
                else:
                    quoted = False
            else:
                field.append(ch)
        elif ch == '"':
            quoted = True
        elif ch == ",":
            fields.append("".join(field))
            field = []
        else:
            field.append(ch)
        i += 1
    fields.append("".join(field))
    return fields


def read_rows(text):
    """All rows of ``text``; blank lines (such as a final newline) yield no row."""
    return [parse_line(line) for line in text.splitlines() if line.strip()]
