"""Embedded adapters: SQLite, a local key file (and later files and an in-process workflow)."""
