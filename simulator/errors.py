"""The one exception type users see: a bad input, explained in one line."""


class ConfigError(ValueError):
    """Bad user input. The message names the field path, the rule and the value."""
