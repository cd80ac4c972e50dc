"""Implementations of the ports. Only ``mcpbridge.bootstrap`` imports from here."""
