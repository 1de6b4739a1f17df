"""The one error type for bad user input.

Every layer raises :class:`InputError` for input a user can fix; the CLI turns it into one line on
stderr and exit code 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input: names the field, what was given and what is allowed."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")
