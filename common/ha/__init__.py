"""High availability: leader election and retrieval, job stores and progress, standalone and
ZooKeeper."""
