"""``python -m tackroom.cli``."""

from tackroom.cli import main

main()
