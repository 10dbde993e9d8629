"""The exceptions the command line reports in one line, kept free of heavy imports (it loads
them first)."""


class InputError(ValueError):
    """Bad user input. The message is one line and names the file and line, column or id."""


class JobError(RuntimeError):
    """A failure of the run that is not the input's and that running again would meet again
    (a part actor that cannot start). The message is one line."""


def one_line(error: Exception) -> str:
    """The first line of a library's error message (its name when the message is empty), to
    quote inside an :class:`InputError`."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
