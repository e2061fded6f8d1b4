"""Generated protobuf messages and gateway stubs (scripts/gen_protos.py)."""
