"""Cluster configuration: value kinds, option declarations, loading and cross-key checks."""
