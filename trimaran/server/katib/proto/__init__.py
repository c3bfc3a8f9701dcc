"""Katib's DBManager protocol: our proto (Katib's names and field numbers) and its generated modules."""
