"""Protobuf and gRPC code generated from sdk/proto/arena.proto (package arena.v1).

Do not edit: regenerate with `python sdk/python/scripts/generate_proto.py`."""
