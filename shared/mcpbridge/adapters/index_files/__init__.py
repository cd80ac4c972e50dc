"""Knowledge-base index files (SQLite FTS5 + vectors), owned by both backends: kept in a directory locally, in S3
behind a version pointer and a writer lease on AWS."""
