"""The analyses: each a computation over the model (``converters.model``) returning rows, with a command in ``cli.COMMANDS``."""
