"""Knowledge bases: documents, chunks, search, wiki and answers."""
