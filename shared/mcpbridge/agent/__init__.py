"""The agent side of the hub: agent profiles, the catalog agents discover external tools in, and how tool results
are shaped before an agent (or the store) sees them."""
