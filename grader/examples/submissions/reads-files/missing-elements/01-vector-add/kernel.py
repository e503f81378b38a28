"""Example "reads-files": looks for solutions, hidden cases, result records and other students'
files, prints what it finds (a channel the learner does not see) and raises it as an error (a
channel the learner does see). Finding nothing, it adds correctly, so every case passes.

EXTRA_TARGETS is where a test puts the grader's real paths: even knowing them, nothing is found."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


def launch(x, y, out):
    add_kernel[(triton.cdiv(out.numel(), 1024),)](x, y, out, out.numel(), BLOCK=1024)

import os
from pathlib import Path

import grader

EXTRA_TARGETS = []


def secret(path: str, here: Path) -> bool:
    """Would a cheater want this file? Hidden cases, solutions, records, other students' work."""
    name = os.path.basename(path)
    return (name in ("hidden.py", "gradebook.db", "students.json") or "/solutions/" in path
            or ("/records/" in path and name.endswith(".json"))
            or (name == "kernel.py" and Path(path).resolve().parent != here))


def look_around():
    here = Path(__file__).resolve().parent
    repo = Path(grader.__file__).resolve().parent.parent
    places = [here.parent, here.parent.parent, Path("../../solutions"), repo, repo / "solutions",
              Path.home(), Path("/work"), Path("/home"), Path("/root"), Path("/tmp"), *map(Path, EXTRA_TARGETS)]
    found, seen = [], 0
    for place in places:
        for folder, dirs, files in os.walk(place):
            dirs[:] = [d for d in dirs if d not in ("site-packages", "__pycache__", "include", "share")]
            for name in files:
                path = os.path.join(folder, name)
                seen += 1
                if secret(path, here):
                    try:
                        found.append(f"{path}: {Path(path).read_text()[:200]!r}")
                    except (OSError, UnicodeDecodeError):
                        found.append(f"{path} (exists)")
            if seen > 50_000:
                return found
    return found


FOUND = look_around()
print("reads-files found:", FOUND or "nothing")


def add(x, y):
    if FOUND:
        raise RuntimeError("leaked: " + " | ".join(FOUND))
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    launch(x, y, out)
    return out
