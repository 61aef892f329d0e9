"""The Python API and the kernels under deliberate attack (issue 12): argument names that clash with call()'s own,
huge numbers, absurd geometry, memory writes that must be checked before any data is touched, messages that
report values as given, the reserved params slots, and one Simulator shared by threads."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest
import yaml

import sim
from sim.cli import main

ROOT = Path(__file__).resolve().parent.parent
BN_CONFIG = yaml.safe_load((ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml").read_text())
BN_ARGS = dict(x=0xA0000000, dy=0xB0000000, dx=0xA1000000,
               params=[0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, 4, 64, 1])


def cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


# --- item 2: kernel arguments named like call()'s own parameters ------------------------------------------

RESERVED = ["symbol", "self", "numerics", "progress", "tiling"]


@pytest.mark.parametrize("name", RESERVED)
@pytest.mark.parametrize("command", ["run", "validate"])
def test_run_config_argument_clashing_with_call_is_one_line_exit_2(tmp_path, name, command):
    doc = yaml.safe_load(yaml.safe_dump(BN_CONFIG))
    doc["args"][name] = "fp_batch_norm_grad_s" if name == "symbol" else 1
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(doc))
    argv = [command, str(path)] + (["--out-dir", str(tmp_path / "out")] if command == "run" else [])
    rc, _, err = cli(argv)
    assert rc == 2
    assert err.startswith("dspsim: error: ") and err.count("\n") == 1, err
    assert f"args.'{name}'" in err and "reserved" in err and "TypeError" not in err


@pytest.mark.parametrize("name", ["symbol", "self"])
def test_api_argument_named_like_calls_positional_parameters_is_a_kernel_arg_error(name):
    m = sim.Simulator("FT78NE")
    for method in (m.call, m.bind, m.plan, m.plan_with_choice):
        with pytest.raises(sim.KernelArgError, match=f"argument '{name}'.*reserved"):
            method("fp_batch_norm_grad_s", **BN_ARGS, **{name: 1})


@pytest.mark.parametrize("name", ["numerics", "progress", "tiling"])
def test_bind_refuses_calls_keywords_as_kernel_arguments(name):
    with pytest.raises(sim.KernelArgError, match=f"argument '{name}'.*reserved"):
        sim.Simulator("FT78NE").bind("fp_batch_norm_grad_s", **BN_ARGS, **{name: None})


def test_symbol_is_positional_only_and_still_works_positionally():
    m = sim.Simulator("FT78NE")
    assert m.call("fp_batch_norm_grad_s", numerics=False, **BN_ARGS).cycles > 0


def test_no_kernel_declares_a_reserved_argument_name():
    import kernels
    from kernels.base import RESERVED_ARGUMENT_NAMES
    assert set(RESERVED_ARGUMENT_NAMES) == set(RESERVED)
    for s in kernels.symbols():
        assert not {a.name for a in s.kernel.args} & set(RESERVED)
