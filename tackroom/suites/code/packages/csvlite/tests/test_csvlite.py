import unittest

from csvlite import convert_row, format_line, parse_line, read_rows, write_rows


class ReaderTests(unittest.TestCase):
    def test_plain(self):
        self.assertEqual(parse_line("a,b,c"), ["a", "b", "c"])

    def test_empty_fields(self):
        self.assertEqual(parse_line("a,,c"), ["a", "", "c"])

    def test_quoted_comma(self):
        self.assertEqual(parse_line('a,"b,c",d'), ["a", "b,c", "d"])

    def test_doubled_quote(self):
        self.assertEqual(parse_line('"say ""hi""",x'), ['say "hi"', "x"])

    def test_read_rows(self):
        self.assertEqual(read_rows("a,b\nc,d"), [["a", "b"], ["c", "d"]])

    def test_trailing_newline(self):
        self.assertEqual(read_rows("a,b\nc,d\n"), [["a", "b"], ["c", "d"]])


class WriterTests(unittest.TestCase):
    def test_plain(self):
        self.assertEqual(format_line(["a", 1, 2.5]), "a,1,2.5")

    def test_comma_is_quoted(self):
        self.assertEqual(format_line(["a,b", "c"]), '"a,b",c')

    def test_quote_is_doubled(self):
        self.assertEqual(format_line(['say "hi"']), '"say ""hi"""')

    def test_round_trip(self):
        rows = [["x", 'q"uote', "c,omma"], ["1", "", "3"]]
        self.assertEqual(read_rows(write_rows(rows)), rows)


class SchemaTests(unittest.TestCase):
    def test_ints_and_floats(self):
        self.assertEqual(convert_row(["1", "2.5", "x"], ["int", "float", "str"]), [1, 2.5, "x"])

    def test_empty_is_none(self):
        self.assertEqual(convert_row(["", "x"], ["int", "str"]), [None, "x"])

    def test_bool_words(self):
        self.assertEqual(convert_row(["yes", "No", "TRUE", "0"], ["bool"] * 4),
                         [True, False, True, False])

    def test_bool_rejects_other(self):
        with self.assertRaises(ValueError):
            convert_row(["maybe"], ["bool"])

    def test_length_mismatch(self):
        with self.assertRaises(ValueError):
            convert_row(["1"], ["int", "int"])

    def test_unknown_type(self):
        with self.assertRaises(ValueError):
            convert_row(["1"], ["decimal"])


if __name__ == "__main__":
    unittest.main()
