"""Offline stand-in for AppWorld: our own apps, tasks and evaluators on SQLite (see backend.py)."""
