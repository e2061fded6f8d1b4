"""The bottom layer: ids, errors, lifecycle states, resources, slots and I/O counters."""
