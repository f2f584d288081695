"""A small command-line option parser."""

from cliargs.parser import ArgError, Parser

__all__ = ["ArgError", "Parser"]
