"""PyTorch computing with the oneMKL kernels the arena's libtorch binaries use, for the benches
that compare the two (ppo/bench/update_throughput.py, baseline/bench/update_throughput.py).

oneMKL takes its AVX2 kernels on any CPU that is not Intel's, whatever instruction sets it
reports; the arena's binaries answer its vendor check themselves so that it chooses by the
instruction sets (torchkit/src/mkl_kernels.rs, docs/ppo-tracker.md §12.3). A comparison with
PyTorch is like for like only when PyTorch gets the same answer: `same_kernels()` runs the
calling script again with LD_PRELOAD of a one-function library that gives it, built with the C
compiler. Call it before `import torch`. ARENA_PYTORCH_MKL_AS_IS=1 keeps PyTorch's own answer.
"""

import os
import shutil
import subprocess
import sys
import tempfile

_MARK = "ARENA_MKL_VENDOR_ANSWER"


def same_kernels():
    """Re-executes the script with the answer preloaded, once; returns the line that says which
    kernels PyTorch computes with (for the report)."""
    if os.environ.get(_MARK):
        return f"PyTorch with oneMKL's vendor check answered as the arena's binaries do ({os.environ[_MARK]})"
    if os.environ.get("ARENA_PYTORCH_MKL_AS_IS") == "1":
        return "PyTorch with oneMKL's own vendor check (ARENA_PYTORCH_MKL_AS_IS=1)"
    cc = shutil.which("cc") or shutil.which("gcc")
    if sys.platform != "linux" or cc is None:
        return "PyTorch with oneMKL's own vendor check (no C compiler here to build the answer)"
    folder = tempfile.mkdtemp(prefix="arena-mkl-answer-")
    source = os.path.join(folder, "answer.c")
    library = os.path.join(folder, "libmkl_vendor_answer.so")
    with open(source, "w") as f:
        f.write("int mkl_serv_intel_cpu_true(void) { return 1; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", library, source], check=True)
    preload = " ".join(p for p in (library, os.environ.get("LD_PRELOAD", "")) if p)
    env = dict(os.environ, LD_PRELOAD=preload, **{_MARK: library})
    os.execve(sys.executable, [sys.executable] + sys.argv, env)
