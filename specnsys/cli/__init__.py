"""Command-line interface: one module per command, thin glue over the library."""
