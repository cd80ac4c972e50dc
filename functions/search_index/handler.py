"""Lambda entry point: the search index (Lance) for the other functions, and its upkeep jobs."""

from mcpbridge.search_entry import make_search_handler

handler = make_search_handler()
