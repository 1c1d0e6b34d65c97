"""The ``orleanspy`` subcommands, one module each: ``add_parser(subparsers)`` registers the
command's arguments and handler; the handler takes the parsed arguments and returns the exit
code."""
