"""What a CPU run launched, compiled for the course's GPU without one (grader.core.gpu_compile):
the interpreter runs kernels that Triton's compiler refuses or a GPU cannot launch."""

import textwrap

import pytest
import torch

from grader.core import device, gpu_compile

pytestmark = pytest.mark.skipif(device.is_cuda(), reason="on a GPU the kernels compile for real")

KERNELS = textwrap.dedent("""
    import triton
    import triton.language as tl


    @triton.jit
    def first_negative(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        found = -1
        for i in range(0, n):
            if tl.load(x_ptr + i) < 0:
                found = i
                break
        tl.store(out_ptr, found)


    @triton.jit
    def big_tiles(a_ptr, c_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        rm, rn, rk = tl.arange(0, BLOCK_M), tl.arange(0, BLOCK_N), tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for k in range(0, 4):
            a = tl.load(a_ptr + rm[:, None] * BLOCK_K + rk[None, :] + k)
            b = tl.load(a_ptr + rk[:, None] * BLOCK_N + rn[None, :] + k)
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * BLOCK_N + rn[None, :], acc)


    @triton.jit
    def row_sum(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
        acc = tl.zeros([BLOCK], dtype=x_ptr.dtype.element_ty)
        for start in range(0, N, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        tl.store(out_ptr, tl.sum(acc, axis=0))


    @triton.jit
    def copy(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))
""")


def _load(tmp_path):
    import importlib.util

    path = tmp_path / "kernels.py"
    path.write_text(KERNELS)
    spec = importlib.util.spec_from_file_location("gpu_compile_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


def test_what_the_interpreter_runs_and_a_gpu_refuses_is_named_with_its_line(tmp_path):
    path, kernels = _load(tmp_path)
    with gpu_compile.LaunchRecorder() as recorder:
        out = torch.zeros(1, dtype=torch.int32)
        kernels.first_negative[(1,)](torch.tensor([1.0, -2.0, 3.0]), out, 3, BLOCK=4)
        assert out.item() == 1, "the interpreter runs the loop with its break"
        kernels.big_tiles[(1,)](
            torch.randn(1 << 20), torch.zeros(256 * 256), BLOCK_M=256, BLOCK_N=256, BLOCK_K=128, num_stages=4
        )
        x, copied = torch.arange(8.0), torch.zeros(8)
        kernels.copy[(1,)](x, copied, BLOCK=8)
        kernels.copy[(1,)](x, copied, BLOCK=8)  # the same specialisation: recorded once
    assert [launch.name for launch in recorder.launches.values()] == ["first_negative", "big_tiles", "copy"]
    compiled = gpu_compile.compile_launches(path, list(recorder.launches.values()))
    assert (compiled.checked, compiled.chosen) == (3, 3)
    findings = {finding.launch.name: finding.problem for finding in compiled.findings}
    assert set(findings) == {"first_negative", "big_tiles"}, findings
    assert "unsupported AST node type: Break" in findings["first_negative"]
    assert "(line 12 of kernels.py): unsupported AST node type: Break" in findings["first_negative"]  # the `break`
    assert "bytes of shared memory" in findings["big_tiles"]
    assert str(gpu_compile.MAX_SHARED_BYTES) in findings["big_tiles"]


def test_one_specialisation_per_kernel_and_constexpr_setting_comes_first():
    def launch(name, block, dtype="*fp32"):
        return gpu_compile.Launch(name, {"x": dtype, "BLOCK": "constexpr"}, {"BLOCK": block}, {"num_warps": 4})

    launches = [launch("a", 64), launch("a", 64, "*fp16"), launch("a", 128), launch("b", 64)]
    assert [(c.name, c.constexprs["BLOCK"], c.signature["x"]) for c in gpu_compile.chosen(launches, 3)] == [
        ("a", 64, "*fp32"),
        ("a", 128, "*fp32"),
        ("b", 64, "*fp32"),
    ]
    assert launches[0].describe() == "a(BLOCK=64, num_warps=4)"


def test_a_loop_carried_value_whose_dtype_changes_is_named_with_what_it_means(tmp_path):
    """A float16 accumulator that the loop adds float32 values to: the interpreter sums, the
    compiler refuses (the value's dtype must stay the same across the loop)."""
    path, kernels = _load(tmp_path)
    with gpu_compile.LaunchRecorder() as recorder:
        out = torch.zeros(1)
        kernels.row_sum[(1,)](torch.ones(100, dtype=torch.float16), out, 100, BLOCK=32)
    assert out.item() == 100.0
    compiled = gpu_compile.compile_launches(path, list(recorder.launches.values()))
    (finding,) = compiled.findings
    assert "Loop-carried variable acc has initial type" in finding.problem
    assert "keep one dtype" in finding.problem and "of kernels.py)" in finding.problem


def test_recording_leaves_the_launch_counters_installed_meanwhile_in_place(tmp_path):
    """A wrapper put on the interpreter's launch entry while a recorder is active (the grader's
    launch counter, created on first use) must still count once the recorder is done."""
    from triton.runtime.interpreter import InterpretedFunction

    path, kernels = _load(tmp_path)
    counted = []
    with gpu_compile.LaunchRecorder():
        below = InterpretedFunction.run

        def counting(self, *args, **kwargs):
            counted.append(self)
            return below(self, *args, **kwargs)

        InterpretedFunction.run = counting
    try:
        kernels.copy[(1,)](torch.arange(8.0), torch.zeros(8), BLOCK=8)
        assert len(counted) == 1, "the counter installed during the recording was taken off"
    finally:
        InterpretedFunction.run = below
