"""What the index covers and under which rules: the collections and their fields, content
tables, sources beyond content, declared reference paths and URL prefixes, rules versions."""
