"""Small internal helpers: clock, stable hashing, eager coroutine start."""
