"""Removing tenants and users: what a deleted workspace or user owned, across every package."""
