"""CLI subcommands (thin shells over the library)."""
