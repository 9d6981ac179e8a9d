"""switchemu: an emulated switch for MLCC load tables over ZeroMQ (see docs/switchemu.md)."""
