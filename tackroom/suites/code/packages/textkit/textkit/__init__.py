"""Small text helpers: slugs, wrapping, case conversion and word counts."""

from textkit.case import camel_to_snake, snake_to_camel
from textkit.count import top_words, word_counts
from textkit.slug import slugify
from textkit.wrap import truncate, wrap

__all__ = ["camel_to_snake", "slugify", "snake_to_camel", "top_words", "truncate",
           "word_counts", "wrap"]
