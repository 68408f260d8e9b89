"""The pure scheduling core: snapshot in, decisions out. No I/O, clock, database or logging."""
