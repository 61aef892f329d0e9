"""The core install is enough to simulate: with the extras' modules missing (matplotlib, Dask, pandas, pyarrow,
scipy, ruamel.yaml), `dspsim run` runs every shipped config, while `dspsim sweep`, `calibrate` and the pictures
stop at once with one line naming the extra to install (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Runs sim.cli.main once per argument list of argv[1:] (JSON), with the extras' modules unimportable; prints the
#: exit codes as JSON.
WITHOUT_EXTRAS = r"""
import importlib.abc, json, sys
BLOCKED = {"matplotlib", "pandas", "pyarrow", "dask", "distributed", "scipy", "ruamel"}
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Missing())
from sim.cli import main
codes = [main(argv) for argv in json.loads(sys.argv[1])]
assert not BLOCKED & {m.split(".")[0] for m in sys.modules}, "an extra's module was imported"
print(json.dumps(codes))
"""


def _without_extras(runs: list[list[str]], cwd: Path) -> tuple[list[int], str, str]:
    import json
    proc = subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, json.dumps(runs)], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                                       "DSPSIM_NO_CACHE": "1"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    return json.loads(lines[-1]), proc.stderr, "\n".join(lines[:-1])


def test_the_core_install_runs_every_shipped_config_and_names_the_extra_the_rest_needs(tmp_path):
    configs = sorted((ROOT / "configs").glob("*.yaml"))
    assert len(configs) >= 18
    runs = [["run", str(c), "--out-dir", str(tmp_path / c.stem)] for c in configs]
    sweep = ROOT / "configs" / "sweeps" / next(p.name for p in sorted((ROOT / "configs" / "sweeps").glob("*.yaml")))
    trace = tmp_path / configs[0].stem / "trace.json"
    runs += [["sweep", str(sweep), "-o", str(tmp_path / "sweep")],
             ["calibrate", "--target", "FT78NE", str(tmp_path / "none.csv"), "-o", str(tmp_path / "fitted.yaml")],
             ["validate", str(configs[0]), "--plot", str(tmp_path / "layout.png")]]
    codes, err, _ = _without_extras(runs, tmp_path)
    assert codes[:len(configs)] == [0] * len(configs), err
    assert codes[len(configs):] == [2, 2, 2], err
    lines = [ln for ln in err.splitlines() if ln.startswith("dspsim: error:")]
    assert lines == [
        "dspsim: error: dspsim sweep needs the 'sweep' extra (pandas is not installed): pip install 'dspsim[sweep]' "
        "(or, in a checkout, pip install -e '.[sweep]')",
        "dspsim: error: dspsim calibrate needs the 'calibrate' extra (scipy is not installed): pip install "
        "'dspsim[calibrate]' (or, in a checkout, pip install -e '.[calibrate]')",
        "dspsim: error: --plot needs the 'plots' extra (matplotlib is not installed): pip install 'dspsim[plots]' "
        "(or, in a checkout, pip install -e '.[plots]')"]
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "fitted.yaml").exists()
    assert trace.parent.is_dir()


def test_a_missing_extra_stops_a_command_before_any_work(tmp_path):
    """`validate --plot` without matplotlib prints no layout map and writes no tuning-cache entry; a bad picture
    suffix is refused first too; `sweep` without its extra imports none of its configs' kernel files."""
    config = ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml"
    marker = tmp_path / "imported"
    (tmp_path / "k.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit('not a kernel')\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config.read_text() + "kernels: [k.py]\n")
    (tmp_path / "s.yaml").write_text("configs: [c.yaml]\ngrid: {args.core_mask: [1, 3]}\n")
    runs = [["validate", str(config), "--plot", str(tmp_path / "layout.png")],
            ["validate", str(config), "--plot", str(tmp_path / "layout.txt")],
            ["sweep", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "o"), "--allow-kernels"]]
    codes, err, out = _without_extras(runs, tmp_path)
    assert codes == [2, 2, 2], err
    assert out == "", out  # no layout map: nothing ran
    assert "--plot " in err and "unknown picture format '.txt'" in err
    assert not marker.exists() and not (tmp_path / "o").exists()
