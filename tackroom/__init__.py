"""tackroom: evaluate, diagnose and train language-model agents across harnesses."""

__version__ = "0.1.0"
