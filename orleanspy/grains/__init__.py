"""Grains: the Grain base, class decorators, grain interfaces, references and persistent state."""
