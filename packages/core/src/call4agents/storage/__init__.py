"""Storage: the only code that talks SQL: tables, migrations, engines, dialects, the store."""
