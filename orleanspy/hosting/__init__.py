"""Hosting: builds a silo from options (storage, reminders, cluster, streams, Spark)."""
