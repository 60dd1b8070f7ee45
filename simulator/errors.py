"""The one exception type users see: a bad input, explained in one line."""


class ConfigError(ValueError):
    """Bad user input. The message names the field path, the rule and the value."""


def missing_extra(what: str, package: str, extra: str) -> ConfigError:
    """The error for an option that needs an optional dependency (``extra`` of servesim's) that is
    not installed: how to install it, from the wheel or from a checkout."""
    return ConfigError(
        f'{what}: {package} is not installed; pip install "servesim[{extra}]" '
        f'(in a checkout of servesim: pip install -e ".[{extra}]")'
    )
