"""Example "writes-files": tries to write files outside its folder (the repository, the parent
folders, /tmp, and EXTRA_TARGETS, where a test puts the results and submissions folders), and to
overwrite any result record it can reach. Then it adds correctly."""

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

import glob
from pathlib import Path

import grader

EXTRA_TARGETS = []
MARK = "written-by-writes-files"


def scribble():
    here = Path(__file__).resolve().parent
    repo = Path(grader.__file__).resolve().parent.parent
    folders = [here.parent, here.parent.parent, repo, repo / "grader", repo / "solutions", Path("/tmp"),
               Path("/var/tmp"), Path("/dev/shm"), *map(Path, EXTRA_TARGETS)]
    done = []
    for folder in folders:
        try:
            (folder / MARK).write_text("x")
            done.append(str(folder / MARK))
        except OSError:
            pass
    for target in EXTRA_TARGETS:
        for record in glob.glob(f"{target}/**/*.json", recursive=True):
            try:
                Path(record).write_text('{"passed": true}')
                done.append(record)
            except OSError:
                pass
    return done


print("writes-files wrote:", scribble() or "nothing")


def add(x, y):
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    launch(x, y, out)
    return out
