"""Every config an autotuned reference offers gives right results, not only the first.

Correctness runs launch an autotuned kernel with its first config (``grader.core.device``); a tuner
on some GPU may pick any other. A result that is right only for the first (a grid computed from a
fixed tile size instead of the config's, a mask that assumes the largest tile) would pass every
case there, so here each module's public cases run with each config first in turn.
"""

from __future__ import annotations

import re

import pytest
import triton

from grader.core import cases, device
from grader.core.catalog import available_modules
from grader.core.checks import check_case
from grader.core.loading import load_kernel
from grader.core.protocols import Raises, Warns

AUTOTUNED = [
    m
    for m in available_modules()
    if (m.solution_dir / "kernel.py").is_file()
    and re.search(r"^@triton\.autotune", (m.solution_dir / "kernel.py").read_text(), re.MULTILINE)
]

pytestmark = pytest.mark.skipif(
    not getattr(triton.autotune, "_interpreter_shim", False),
    reason="only where autotuning is replaced by a config chosen in advance (the "
    "interpreter, or GRADER_AUTOTUNE=first on a GPU)",
)


def _config_counts(kernel) -> int:
    """The most configs any autotuned kernel of the loaded file offers."""
    tuned = [value for value in vars(kernel.namespace).values() if isinstance(value, device._FirstConfig)]
    return max((len(value.configs) for value in tuned), default=1)


def _result_cases(module):
    spec, public = cases.public(module)
    chosen = [
        c
        for c in cases.for_mode(public, device.is_cuda())
        if not isinstance(cases.spec_for(c, spec).protocol, (Raises, Warns))
    ]
    return spec, chosen


@pytest.mark.parametrize("module", AUTOTUNED, ids=lambda m: m.id)
def test_each_config_of_the_reference_gives_right_results(module, monkeypatch, request):
    if request.config.getoption("--impl") != "solutions":
        pytest.skip("checks the reference solutions (--impl=solutions)")
    kernel = load_kernel(module, "solutions")
    spec, chosen = _result_cases(module)
    assert _config_counts(kernel) > 1 and chosen, f"{module.id}: no autotuned kernel with several configs"
    for forced in range(1, _config_counts(kernel)):
        monkeypatch.setattr(device, "FORCED_CONFIG", forced)
        for case in chosen:
            try:
                check_case(kernel, spec, case)
            except AssertionError as error:
                raise AssertionError(f"with the autotuner's config #{forced + 1} first: {error}") from None


def test_a_grid_from_a_fixed_tile_size_fails_under_another_config(monkeypatch, tmp_path):
    """The check can fail: optimization/05's grid computed from the first config's tile size."""
    from grader.core.catalog import find_module

    module = find_module("optimization/05-advanced-optimizations")
    source = (module.solution_dir / "kernel.py").read_text()
    fixed = 'tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])'
    assert source.count(fixed) == 1
    (tmp_path / "kernel.py").write_text(source.replace(fixed, "tiles = triton.cdiv(M, 128) * triton.cdiv(N, 256)"))
    kernel = load_kernel(module, tmp_path / "kernel.py")
    spec, chosen = _result_cases(module)
    # Under the interpreter the first config is 128 x 256 for every shape, so every case passes; on a
    # GPU the kernel's pruning picks the first config per shape, and the fixed count may be off already.
    for case in chosen if not device.is_cuda() else ():
        check_case(kernel, spec, case)
    failed = []
    for forced in range(1, _config_counts(kernel)):  # other tiles: fewer programs than tiles to cover
        monkeypatch.setattr(device, "FORCED_CONFIG", forced)
        for case in chosen:
            try:
                check_case(kernel, spec, case)
            except AssertionError:
                failed.append((forced, case.name))
    assert failed
