"""Renderers over the canonical results: `render(results) -> str`, no I/O."""
