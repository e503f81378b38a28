import pytest
import torch
import triton
import triton.language as tl

from grader.core import device


def test_interpreter_is_selected_without_cuda():
    if torch.cuda.is_available():
        assert device.mode() == "cuda"
    else:
        assert device.mode() == "interpreter" and device.torch_device().type == "cpu"


def test_autotuned_kernels_run_with_the_first_config():
    @triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])
    @triton.jit
    def fill(out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, offsets * 0 + BLOCK, mask=offsets < n)

    out = torch.zeros(100, dtype=torch.int32, device=device.torch_device())
    fill[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](out, 100)
    # The interpreter runs configs[0]; a GPU runs whichever config the autotuner picked.
    allowed = {32} if device.mode() == "interpreter" else {32, 64}
    assert int(out[0]) in allowed and bool((out == out[0]).all())


def test_the_first_config_runs_its_pre_hook_and_launch_options(monkeypatch):
    """The grader's correctness runs on a GPU skip tuning too: the first config must launch as the
    autotuner would launch it, its pre_hook (which may zero an output) and num_warps included."""
    monkeypatch.setattr(triton, "autotune", triton.autotune)  # restored after the test
    device.run_first_autotune_config()
    hooked = []

    def zero_output(named):
        hooked.append(sorted(named))
        named["out_ptr"].zero_()

    @triton.autotune(
        configs=[
            triton.Config({"BLOCK": 32}, num_warps=2, pre_hook=zero_output),
            triton.Config({"BLOCK": 64}, num_warps=4),
        ],
        key=["n"],
    )
    @triton.jit
    def add_block(out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(out_ptr + offsets, mask=mask) + BLOCK, mask=mask)

    out = torch.full((100,), 7, dtype=torch.int32, device=device.torch_device())
    add_block[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](out, 100)
    assert hooked == [["BLOCK", "n", "out_ptr"]]
    assert bool((out == 32).all()), out  # zeroed by the hook, then BLOCK of the first config added


def test_masked_loads_without_other_are_nan_under_the_interpreter():
    if device.is_cuda():
        pytest.skip("only the interpreter is made strict; a GPU leaves those lanes undefined")

    @triton.jit
    def padded_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offsets, mask=offsets < n)  # no other=: padding is undefined
        tl.store(out_ptr, tl.sum(x.to(tl.float32), axis=0))

    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        out = torch.zeros(1)
        padded_sum[(1,)](torch.ones(5, dtype=dtype), out, 5, BLOCK=8)
        assert torch.isnan(out).all(), dtype


def test_the_first_config_that_fits_is_launched(monkeypatch):
    """A GPU compiles a config that needs more shared memory than it has only to fail; the
    autotuner passes it over, so the first-config stand-in must too (and remember it)."""
    from triton.runtime.errors import OutOfResources

    monkeypatch.setattr(triton, "autotune", triton.autotune)  # restored after the test
    device.run_first_autotune_config()
    compiled = []

    class TooBigAbove32:
        arg_names = ["out_ptr", "n"]

        def __getitem__(self, grid):
            def run(*args, BLOCK, **options):
                compiled.append(BLOCK)
                if BLOCK > 32:
                    raise OutOfResources(BLOCK * 4096, 232448, "shared memory")
                return BLOCK

            return run

    tuned = triton.autotune(
        configs=[
            triton.Config({"BLOCK": 128}),
            triton.Config({"BLOCK": 64}),
            triton.Config({"BLOCK": 32}),
            triton.Config({"BLOCK": 16}),
        ],
        key=["n"],
    )(TooBigAbove32())
    assert tuned[(1,)](None, 100) == 32 and tuned.best_config.kwargs == {"BLOCK": 32}
    assert tuned[(1,)](None, 100) == 32 and compiled == [128, 64, 32, 32]  # no second try


def test_when_no_config_fits_the_last_ones_error_is_raised(monkeypatch):
    from triton.runtime.errors import OutOfResources

    monkeypatch.setattr(triton, "autotune", triton.autotune)
    device.run_first_autotune_config()

    class NeverFits:
        arg_names = ["out_ptr"]

        def __getitem__(self, grid):
            def run(*args, BLOCK, **options):
                raise OutOfResources(BLOCK * 4096, 232448, "shared memory")

            return run

    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 32})], key=[])(NeverFits())
    with pytest.raises(OutOfResources, match=str(32 * 4096)):
        tuned[(1,)](None)


def test_a_config_too_big_for_one_dtype_is_still_used_for_another(monkeypatch):
    """Shared memory grows with the element size: a tile that does not fit for float32 data may fit
    for float16, so a failure is remembered per dtype (and per config, even one built afresh)."""
    from triton.runtime.errors import OutOfResources

    monkeypatch.setattr(triton, "autotune", triton.autotune)
    device.run_first_autotune_config()

    class BigTilesNeedHalves:
        arg_names = ["x_ptr"]

        def __getitem__(self, grid):
            def run(x, BLOCK, **options):
                if BLOCK > 32 and x.element_size() > 2:
                    raise OutOfResources(BLOCK * x.element_size() * 1024, 232448, "shared memory")
                return BLOCK

            return run

    def fresh_configs(configs, named, **kwargs):  # new Config objects on every call
        return [triton.Config(dict(c.kwargs)) for c in configs]

    tuned = triton.autotune(
        configs=[triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 32})],
        key=[],
        prune_configs_by={"early_config_prune": fresh_configs},
    )(BigTilesNeedHalves())
    fp32, fp16 = torch.zeros(4), torch.zeros(4, dtype=torch.float16)
    assert [tuned[(1,)](fp32), tuned[(1,)](fp16), tuned[(1,)](fp32), tuned[(1,)](fp16)] == [32, 128, 32, 128]


def test_retuning_forgets_every_tuning_made_since_it_began(monkeypatch):
    from triton.runtime import autotuner

    monkeypatch.setattr(autotuner.Autotuner, "__init__", autotuner.Autotuner.__init__)  # undone afterwards
    before = autotuner.autotune(configs=[triton.Config({"BLOCK": 32})], key=["n"])(_fill_kernel())
    forget = device.retuning()
    configs = [triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})]
    tuned = autotuner.autotune(configs=configs, key=["n"])(_fill_kernel())
    kept_on_disk = autotuner.autotune(configs=configs, key=["n"], cache_results=True)(_fill_kernel())
    for tuner in (before, tuned, kept_on_disk):
        tuner.cache[(100,)] = configs[-1]
    kept_on_disk.cache_results = True  # as on a GPU, where the interpreter does not turn it off

    forget()

    assert tuned.cache == {} and kept_on_disk.cache == {}, "the next launch must time the configs again"
    assert not kept_on_disk.cache_results, "a tuning kept on disk would come back untimed"
    assert before.cache == {(100,): configs[-1]}, "only kernels decorated after retuning() began are tracked"


def _fill_kernel():
    @triton.jit
    def fill(out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, offsets * 0 + BLOCK, mask=offsets < n)

    return fill


@triton.jit
def _copy_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))


def test_wrap_triton_takes_an_interpreted_kernel_with_every_supported_pytorch(monkeypatch):
    """PyTorch before 2.13 refuses an interpreted kernel in torch.library.wrap_triton; under the
    interpreter the course hands it back to run as it is, as later PyTorch does."""
    if device.is_cuda():
        pytest.skip("the interpreter's kernels only exist under the interpreter")

    def refusing(kernel):  # what PyTorch 2.11 does with anything but a JITFunction or an Autotuner
        raise RuntimeError("wrap_triton only works on functions annotated with triton.jit or triton.autotune")

    monkeypatch.setattr(torch.library, "wrap_triton", refusing)
    device._let_wrap_triton_take_interpreted_kernels()
    assert torch.library.wrap_triton(_copy_kernel) is _copy_kernel
    x, out = torch.arange(8.0), torch.zeros(8)
    torch.library.wrap_triton(_copy_kernel)[(1,)](x, out, BLOCK=8)
    assert torch.equal(out, x)
    with pytest.raises(RuntimeError, match="only works on functions"):
        torch.library.wrap_triton(print)  # anything else still goes to PyTorch's own check


def test_bfloat16_arithmetic_under_the_interpreter_computes_on_values_not_bits():
    """Triton's interpreter stores bfloat16 as 16-bit patterns and used to add the patterns (0.5 +
    0.75 gave about 6.4e37); the course computes in float32 and rounds to bfloat16, as a GPU does."""
    if device.is_cuda():
        pytest.skip("a GPU computes bfloat16 itself")

    @triton.jit
    def arithmetic(x_ptr, y_ptr, out_ptr, flags_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        x, y = tl.load(x_ptr + offsets), tl.load(y_ptr + offsets)
        tl.store(out_ptr + offsets, tl.exp(-(x * y + x) / y) - 0.25)
        tl.store(flags_ptr + offsets, (x < y).to(tl.int32))

    x = torch.tensor([0.5, -3.0, 2.0, 100.0], dtype=torch.bfloat16)
    y = torch.tensor([0.75, 1.5, -4.0, 0.25], dtype=torch.bfloat16)
    out, flags = torch.empty(4, dtype=torch.bfloat16), torch.empty(4, dtype=torch.int32)
    arithmetic[(1,)](x, y, out, flags, BLOCK=4)
    expected = torch.exp(-(x.float() * y.float() + x.float()) / y.float()) - 0.25
    torch.testing.assert_close(out.float(), expected, rtol=2e-2, atol=1e-2)
    assert flags.tolist() == [1, 1, 0, 0], "comparisons see the values, negative ones included"
