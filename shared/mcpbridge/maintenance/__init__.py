"""Keeping background work from hanging: jobs that failed for good, and the periodic sweep."""
