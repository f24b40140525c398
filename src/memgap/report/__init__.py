"""Renderers: they take data and a stream, and never open files or print on their own."""
