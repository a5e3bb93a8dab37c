"""The analyses: each a computation over the model (``converters.model``) returning rows, and a
command in ``cli.COMMANDS`` that prints them (docs/architecture.md: how to add one)."""
