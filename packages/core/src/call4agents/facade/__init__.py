"""Facade: the Ledger, run and init, the CLI and the quickstart."""
