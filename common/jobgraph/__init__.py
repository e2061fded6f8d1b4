"""The JobGraph a client submits: its model, wire codec, validation and job configuration."""
