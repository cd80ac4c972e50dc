"""Workspaces, users, API keys and how a request is authenticated."""
