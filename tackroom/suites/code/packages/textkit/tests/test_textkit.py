import unittest

from textkit import camel_to_snake, slugify, snake_to_camel, top_words, word_counts, wrap


class SlugTests(unittest.TestCase):
    def test_basic(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")

    def test_separator(self):
        self.assertEqual(slugify("a b  c", sep="_"), "a_b_c")

    def test_accents(self):
        self.assertEqual(slugify("Crème Brûlée"), "creme-brulee")

    def test_digits_kept(self):
        self.assertEqual(slugify("Top 10 Tips"), "top-10-tips")


class WrapTests(unittest.TestCase):
    def test_fits_on_one_line(self):
        self.assertEqual(wrap("a b c", 10), ["a b c"])

    def test_breaks_between_words(self):
        self.assertEqual(wrap("the quick brown fox", 10), ["the quick", "brown fox"])

    def test_long_word_is_cut(self):
        self.assertEqual(wrap("abcdefghij xy", 4), ["abcd", "efgh", "ij", "xy"])

    def test_long_word_after_text(self):
        self.assertEqual(wrap("ok abcdefgh", 4), ["ok", "abcd", "efgh"])

    def test_bad_width(self):
        with self.assertRaises(ValueError):
            wrap("x", 0)


class CaseTests(unittest.TestCase):
    def test_simple_camel(self):
        self.assertEqual(camel_to_snake("parseResponse"), "parse_response")

    def test_acronym(self):
        self.assertEqual(camel_to_snake("HTTPServer"), "http_server")

    def test_acronym_inside(self):
        self.assertEqual(camel_to_snake("parseHTTPResponse"), "parse_http_response")

    def test_snake_to_camel(self):
        self.assertEqual(snake_to_camel("parse_http_response"), "parseHttpResponse")

    def test_snake_to_camel_upper(self):
        self.assertEqual(snake_to_camel("parse_response", upper_first=True), "ParseResponse")


class CountTests(unittest.TestCase):
    def test_counts(self):
        self.assertEqual(word_counts("a b a")["a"], 2)

    def test_case_folded_by_default(self):
        self.assertEqual(word_counts("The the THE")["the"], 3)

    def test_case_kept_when_asked(self):
        self.assertEqual(word_counts("The the", ignore_case=False)["The"], 1)

    def test_top_words_ties_alphabetical(self):
        self.assertEqual(top_words("b a c b a", n=2), ["a", "b"])

    def test_top_words_folds_case(self):
        self.assertEqual(top_words("Dog dog cat", n=1), ["dog"])


if __name__ == "__main__":
    unittest.main()
