"""The command-line modules import one way: cli.py dispatches to onnx_cli.py and
submissions_cli.py, and cli.py and onnx_cli.py share cli_common.py; none of those imports cli.py
back (nor cli_common.py a command), so there is no import cycle."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest
from conftest import SDK_DIR

PACKAGE = SDK_DIR / "src" / "arena_sdk"

#: The modules below cli.py, and the arena_sdk modules each must not import (at any depth of its
#: code: a lazy import inside a function counts too).
FORBIDDEN = {
    "cli_common": {"arena_sdk.cli", "arena_sdk.onnx_cli", "arena_sdk.submissions_cli"},
    "onnx_cli": {"arena_sdk.cli"},
    "submissions_cli": {"arena_sdk.cli"},
    "submit_cli": {"arena_sdk.cli"},
}


def imported_modules(module: str) -> set[str]:
    """Every module the source of arena_sdk.`module` imports, with relative names made absolute
    (`from . import cli` counts as arena_sdk.cli)."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(), filename=f"{module}.py")
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = ["arena_sdk", *module.split(".")[:-1]]
                base = ".".join(parts[: len(parts) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            names.add(source)
            # `from arena_sdk import cli` imports the module arena_sdk.cli.
            names.update(f"{source}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_no_import_back_into_cli(module: str) -> None:
    imported = imported_modules(module)
    bad = sorted(name for name in imported if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[module]))
    assert not bad, f"arena_sdk/{module}.py imports {', '.join(bad)}: shared pieces belong in cli_common.py"


def test_imports_resolve_relative_names() -> None:
    # The check above would pass vacuously if it missed the modules' own imports.
    assert "arena_sdk.cli_common" in imported_modules("onnx_cli")
    assert "arena_sdk.cli_common" in imported_modules("cli")
    assert {"arena_sdk.onnx_cli", "arena_sdk.submissions_cli"} <= imported_modules("cli")


def test_commands_load_without_cli() -> None:
    # At run time too: importing them (in a fresh interpreter) leaves arena_sdk.cli unloaded.
    code = (
        "import sys\n"
        "import arena_sdk.cli_common, arena_sdk.onnx_cli, arena_sdk.submissions_cli, arena_sdk.submit_cli\n"
        "print('arena_sdk.cli' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SDK_DIR / "src")},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
