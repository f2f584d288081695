import unittest

from cliargs import ArgError, Parser


def make():
    return (Parser().add("name").add("count", kind="int", default=1)
            .add("verbose", flag=True, short="v").add("quiet", flag=True, short="q")
            .add("tag", repeat=True).add("cols", kind="list"))


class ParserTests(unittest.TestCase):
    def test_defaults(self):
        got = make().parse([])
        self.assertEqual((got["name"], got["count"], got["verbose"], got["tag"]),
                         (None, 1, False, []))

    def test_value_after_option(self):
        self.assertEqual(make().parse(["--count", "3"])["count"], 3)

    def test_equals_form(self):
        got = make().parse(["--name=ada", "--count=7"])
        self.assertEqual((got["name"], got["count"]), ("ada", 7))

    def test_flag(self):
        self.assertTrue(make().parse(["--verbose"])["verbose"])

    def test_positionals(self):
        self.assertEqual(make().parse(["a", "--count", "2", "b"])["args"], ["a", "b"])

    def test_double_dash_ends_options(self):
        got = make().parse(["--count", "2", "--", "--name", "-v"])
        self.assertEqual(got["args"], ["--name", "-v"])
        self.assertIsNone(got["name"])

    def test_repeat(self):
        self.assertEqual(make().parse(["--tag", "x", "--tag", "y"])["tag"], ["x", "y"])

    def test_repeat_does_not_leak_between_parses(self):
        p = Parser().add("tag", repeat=True, default=["base"])
        p.parse(["--tag", "x"])
        self.assertEqual(p.parse([])["tag"], ["base"])

    def test_short_flag(self):
        self.assertTrue(make().parse(["-v"])["verbose"])

    def test_short_flag_cluster(self):
        got = make().parse(["-vq"])
        self.assertTrue(got["verbose"] and got["quiet"])

    def test_list_kind(self):
        self.assertEqual(make().parse(["--cols", "a, b,,c"])["cols"], ["a", "b", "c"])

    def test_unknown_option(self):
        with self.assertRaises(ArgError):
            make().parse(["--nope"])

    def test_bad_int(self):
        with self.assertRaises(ArgError):
            make().parse(["--count", "x"])

    def test_missing_value(self):
        with self.assertRaises(ArgError):
            make().parse(["--name"])


if __name__ == "__main__":
    unittest.main()
