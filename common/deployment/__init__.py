"""What crosses the wire about one task attempt: its deployment descriptor and its state updates."""
