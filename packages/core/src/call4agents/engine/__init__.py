"""Engine: claiming, leases, waiting, the approval and budget gates, lookups, effects."""
