"""Pulling agents (3): one system target per owned queue reads it into its cache."""
