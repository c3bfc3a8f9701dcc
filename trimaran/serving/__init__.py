"""The model server."""
