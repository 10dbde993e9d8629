"""The one exception of bad input, kept free of heavy imports (the command line loads it first)."""


class InputError(ValueError):
    """Bad user input. The message is one line and names the file and line, column or id."""


def one_line(error: Exception) -> str:
    """The first line of a library's error message (its name when the message is empty), to
    quote inside an :class:`InputError`."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
