"""One reader per source of truth. Parsers take text or bytes; readers do the I/O."""
