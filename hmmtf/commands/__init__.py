"""The subcommands of ``hmmtf``, one module per group, each with ``register(subparsers)``, which
adds its subcommands with their options and sets ``run`` to the function that runs one: it parses,
calls the computing packages and writes what they return (``hmmtf.SUBCOMMAND_MODULES`` names the
module of each subcommand)."""
