"""Declare options, then parse an argv list into a dict.

Supported forms: ``--name value``, ``--name=value``, boolean ``--flag``,
short flags ``-v`` (clustered: ``-vq``), repeatable options, positionals,
and ``--`` to end option parsing.
"""

from cliargs.types import convert


class ArgError(ValueError):
    """The command line does not match the declared options."""


class Option:
    def __init__(self, name, kind="str", default=None, flag=False, repeat=False, short=None):
        self.name = name
        self.kind = kind
        self.default = default
        self.flag = flag
        self.repeat = repeat
        self.short = short


class Parser:
    def __init__(self):
        self.options = {}
        self.shorts = {}

    def add(self, name, kind="str", default=None, flag=False, repeat=False, short=None):
        opt = Option(name, kind, default, flag, repeat, short)
        self.options[name] = opt
        if short:
            self.shorts[short] = opt
        return self

    def _initial(self):
        values = {}
        for name, opt in self.options.items():
            if opt.flag:
                values[name] = False
            elif opt.repeat:
                values[name] = list(opt.default or [])
            else:
                values[name] = opt.default
        return values

    def parse(self, argv):
        """``{"option": value, ..., "args": [positionals]}``."""
        values = self._initial()
        positionals = []
        i = 0
        while i < len(argv):
            arg = argv[i]
            if arg == "--":
                positionals.extend(argv[i + 1:])
                break
            if arg.startswith("--"):
                name, eq, inline = arg[2:].partition("=")
                opt = self._option(name)
                if opt.flag:
                    if eq:
                        raise ArgError(f"--{name} is a flag and takes no value")
                    values[name] = True
                else:
                    if eq:
                        raw = inline
                    else:
                        i += 1
                        if i >= len(argv):
                            raise ArgError(f"--{name} needs a value")
                        raw = argv[i]
                    self._store(values, opt, raw)
            elif arg.startswith("-") and len(arg) > 1:
                for ch in arg[1:]:
                    opt = self.shorts.get(ch)
                    if opt is None or not opt.flag:
                        raise ArgError(f"unknown flag -{ch}")
                    values[opt.name] = True
            else:
                positionals.append(arg)
            i += 1
        values["args"] = positionals
        return values

    def _option(self, name):
        opt = self.options.get(name)
        if opt is None:
            raise ArgError(f"unknown option --{name}")
        return opt

    def _store(self, values, opt, raw):
        try:
            value = convert(raw, opt.kind)
        except ValueError as e:
            raise ArgError(f"--{opt.name}: {e}") from None
        if opt.repeat:
            values[opt.name].append(value)
        else:
            values[opt.name] = value
