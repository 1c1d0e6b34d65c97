"""Grains: the Grain base, decorators, references and persistent state."""
