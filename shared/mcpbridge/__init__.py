"""mcpbridge: a two-way MCP hub for knowledge bases, on serverless AWS or on one machine."""

__version__ = "0.1.0"
