#!/usr/bin/env python3
"""Regenerates the committed protobuf/gRPC code of `arena_sdk._proto` from `sdk/proto/arena.proto`.

The schema is copied into a temporary include tree as `arena_sdk/_proto/arena.proto`, so the
generated gRPC module imports `arena_sdk._proto.arena_pb2` (an absolute import that works once
the package is installed) and the descriptor is registered under a name no other copy of the
schema uses. Needs grpcio-tools (pinned in python/requirements-dev.txt): the output depends on
its version, which the staleness test (tests/test_generated_code.py) relies on.

    python sdk/python/scripts/generate_proto.py            # rewrite src/arena_sdk/_proto/
    python sdk/python/scripts/generate_proto.py --out DIR  # write DIR/arena_pb2.py, ... instead
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = HERE.parents[1] / "proto" / "arena.proto"
PACKAGE_DIR = HERE.parent / "src" / "arena_sdk" / "_proto"
# The path of the schema inside the include tree: it decides the generated modules' imports.
INCLUDE_PATH = "arena_sdk/_proto/arena.proto"
GENERATED = ("arena_pb2.py", "arena_pb2.pyi", "arena_pb2_grpc.py")


def generate(out_dir: Path, proto: Path = PROTO) -> list[Path]:
    """Writes the generated modules into `out_dir`; returns their paths."""
    from grpc_tools import protoc  # imported here so --help works without grpcio-tools

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        include = Path(tmp) / "include"
        generated = Path(tmp) / "out"
        (include / INCLUDE_PATH).parent.mkdir(parents=True)
        generated.mkdir()
        shutil.copyfile(proto, include / INCLUDE_PATH)
        args = [
            "grpc_tools.protoc",
            f"-I{include}",
            f"--python_out={generated}",
            f"--pyi_out={generated}",
            f"--grpc_python_out={generated}",
            INCLUDE_PATH,
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {proto}")
        paths = []
        for name in GENERATED:
            target = out_dir / name
            shutil.copyfile(generated / Path(INCLUDE_PATH).parent / name, target)
            paths.append(target)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=PACKAGE_DIR, help="output folder (default: %(default)s)")
    parser.add_argument("--proto", type=Path, default=PROTO, help="schema (default: %(default)s)")
    args = parser.parse_args(argv)
    for path in generate(args.out, args.proto):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
