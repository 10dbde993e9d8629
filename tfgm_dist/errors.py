"""The one exception of bad input, kept free of heavy imports (the command line loads it first)."""


class InputError(ValueError):
    """Bad user input. The message is one line and names the file and line, column or id."""
