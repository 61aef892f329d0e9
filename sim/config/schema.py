"""The run-config's schema: every key declared once, with its type, unit, allowed values, default and doc.

:func:`sim.config.run_config.load_config` reads a run-config with it (:func:`sim.files.schema.decode`), then checks
the rules between keys (exactly one data source, names unique, a shape that fits the array limit for its
dtype, ``low`` not above ``high``, addresses and seeds beyond 64 bits, tiling keys, kernel files) and builds
:class:`sim.config.run_config.RunConfig`.  The key reference of docs/run-config.md is generated from it
(``python -m sim.config.doc``; tests/test_run_config_doc.py checks that the page and the schema agree).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from sim.files.schema import Spec, param
from sim.model.target_schema import MAX_CORES
from sim.time_limit import MAX_TIME_LIMIT_SECONDS

Dtype = Literal["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                "uint64"]
DTYPES: tuple[str, ...] = get_args(Dtype)
#: Array and trace names become file names under the output folder: no paths, no hidden files.
NAME_PATTERN = r"\A[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z"
#: Longest target or symbol text (no real path is longer; a pasted megabyte is cut).
MAX_TEXT_CHARS = 4096

OneLine = Annotated[str, param("one line of text", min_length=1, max_length=MAX_TEXT_CHARS,
                               pattern=r"\A[^\x00-\x1f\x7f-\x9f\u2028\u2029]*\Z",
                               means="a non-empty one-line string")]
ArrayName = Annotated[str, param("letters, digits, `_`, `.`, `-` (not starting with `.` or `-`), at most 128 "
                                 "characters; unique among the entries of its list; names the array in messages "
                                 "and output files", pattern=NAME_PATTERN,
                                 means="a name of letters, digits, '_', '.', '-' (it names an output file)")]
Address = Annotated[int, param("the address of the array's first byte", ge=0, unit="address", hexa=True)]
Shape = Annotated[list[Annotated[int, param("a size", ge=0, unit="elements")]],
                  param("list of sizes (at most 32 dimensions); the array is written C-contiguous (row-major)",
                        max_length=32, items="sizes")]
Core = Annotated[int, param("the core whose private copy of the region (`l2`) the address is in; required for "
                            "private memory, ignored for shared memory", ge=0, le=MAX_CORES - 1,
                            why=" (no chip has more cores)")]


class Random(Spec):
    """``random:``: uniform random values from ``numpy.random.default_rng(seed)``."""

    seed: Annotated[int, param("the generator's seed", ge=0)] = 0
    low: Annotated[float, param("the smallest value")] = -1.0
    high: Annotated[float, param("the largest value (not below low)")] = 1.0


class Output(Spec):
    """An ``outputs`` entry: an array read back after the call."""

    name: ArrayName
    addr: Address
    shape: Shape
    dtype: Dtype
    core: Core | None = None


#: A data entry's four sources (exactly one per entry): declared once, for run-configs and program files.
FileSource = Annotated[str, param("a NumPy .npy file, relative to the run-config's folder unless absolute",
                                  means="a path string")]
FillSource = Annotated[int | float, param("every element the same number")]
ValuesSource = Annotated[Any, param("the values themselves, a (nested) list of the entry's shape")]


class Data(Spec):
    """A ``data`` entry: an array placed before the call; exactly one of its four sources."""

    name: ArrayName
    addr: Address
    shape: Shape
    dtype: Dtype
    core: Core | None = None
    file: FileSource | None = None
    fill: FillSource | None = None
    random: Random | None = None
    values: ValuesSource = None


class CommonFile(Spec, kw_only=True):
    """The top-level keys a run-config and a program file (:mod:`sim.program.schema`) share."""

    target: Annotated[OneLine, param("chip name or path to a target YAML")]
    description: Annotated[str, param("text", kind="text", absent="empty")] | None = None
    trace: Annotated[str, param("file name", pattern=NAME_PATTERN,
                                means="a file name of letters, digits, '_', '.', '-' (written under the output "
                                      "folder)", absent="`<config file stem>.json`")] | None = None
    numerics: Annotated[bool, param("`true` / `false`", absent="`true`")] = True
    tiling_tolerance: Annotated[float, param("fraction in [0, 1)", ge=0, lt=1,
                                             means="a fraction in [0, 1)",
                                             absent="0.01")] | None = None
    time_limit_seconds: Annotated[float, param(
        f"seconds, more than 0, at most {MAX_TIME_LIMIT_SECONDS:.0f} (30 days)", unit="seconds",
        means=f"a number of seconds more than 0 and at most {MAX_TIME_LIMIT_SECONDS:.0f} (or none)",
        absent="no limit")] | None = None
    kernels: Annotated[list[Annotated[str, param("a Python file or a module name", means=(
        f"a Python file or a module name (one line of at most {MAX_TEXT_CHARS} characters)"))]],
                       param("list of Python files or module names",
                                        items="Python files or module names",
                                        absent="only shipped and installed kernels")] | None = None


class RunConfigFile(CommonFile, kw_only=True):
    """A whole run-config: the shared keys, the call and its data."""

    symbol: Annotated[OneLine, param("kernel symbol")]
    args: Annotated[dict[str, Any], param("mapping: argument name → value")]
    data: Annotated[list[Data], param("list of arrays to place", items="arrays to place",
                                      absent="nothing placed")] | None = None
    outputs: Annotated[list[Output], param("list of arrays to save", items="arrays to save",
                                           absent="nothing saved")] | None = None
    tiling: Annotated[dict[str, Any], param("mapping: tiling key → value",
                                            absent="the cost model chooses")] | None = None
