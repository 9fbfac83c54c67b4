"""Controls: escalation, budgets, undo, replay, observation and OpenTelemetry, stats."""
