"""Model: values without I/O: errors, canonical arguments, the codec, telemetry names."""
