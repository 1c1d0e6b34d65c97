"""Persistent streams: producers → durable queues → pulling agents → bounded cache → consumers."""
