"""Small internal helpers: clock, back-off, tasks, lifecycle, eager and carried turns, back-end
URLs and clients (SQLite, Redis, PostgreSQL), stable hashing, histograms."""
