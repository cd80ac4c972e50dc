"""External MCP services: registry, connections, catalog snapshots, policies."""
