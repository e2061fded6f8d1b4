"""What every service process runs on: the actor, timers, retries, heartbeats, metrics, settings."""
