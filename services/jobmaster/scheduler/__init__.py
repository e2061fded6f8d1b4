"""The scheduler of a batch job: deployments, failover, restart strategies."""
