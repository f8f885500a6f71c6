"""What a release ships, checked as far as this machine allows:

* the Python wheel that `pip wheel .` builds carries our license and the
  third-party licenses, installs, with no index and no network, into a
  fresh virtual environment, and sorts there as the binary does;
* THIRD-PARTY-LICENSES.txt is what scripts/third-party-licenses.py makes of
  Cargo.lock now;
* the conda recipe (packaging/conda/alnsort, bioconda's layout for a Rust
  tool) renders to YAML with the version of Cargo.toml, the C and Rust
  compilers, cargo-bundle-licenses, run_exports and an `alnsort --version`
  test; its build script bundles the licenses and installs with --locked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import harness

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "packaging" / "conda" / "alnsort"
# A wheel build that reuses target/ takes seconds; a cold one minutes.
BUILD_TIMEOUT_S = 1800


def cargo_version() -> str:
    return tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["version"]


@pytest.mark.slow
def test_wheel_installs_offline_into_a_fresh_venv(tmp_path, alnsort_bin):
    dist = tmp_path / "dist"
    # maturin (the build backend) from this Python's environment, as
    # scripts/test.sh installs it: no build isolation, so nothing is fetched.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
    )
    assert res.returncode == 0, f"pip wheel . failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    wheels = list(dist.glob("alnsort-*.whl"))
    assert len(wheels) == 1, f"expected one alnsort wheel, got {[w.name for w in dist.iterdir()]}"
    assert wheels[0].name.startswith(f"alnsort-{cargo_version()}-"), wheels[0].name
    assert "-abi3-" in wheels[0].name, f"{wheels[0].name}: not the one abi3 wheel"
    with zipfile.ZipFile(wheels[0]) as z:
        licenses = {Path(n).name for n in z.namelist() if "/licenses/" in n}
    assert licenses == {"LICENSE", "THIRD-PARTY-LICENSES.txt"}, f"the wheel's license files: {licenses}"

    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    # Nothing of this environment leaks in: the fresh venv sees only itself.
    fresh_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    res = subprocess.run([str(py), "-m", "pip", "install", "--no-index", "--no-deps", str(wheels[0])],
                         capture_output=True, text=True, timeout=300, env=fresh_env)
    assert res.returncode == 0, f"installing the wheel offline failed:\n{res.stderr[-3000:]}"

    src = ROOT / "examples" / "example.sam"
    ours = tmp_path / "python.bam"
    script = (
        "import sys, alnsort\n"
        "stats = alnsort.sort(sys.argv[1], sys.argv[2], no_pg=True, threads=2)\n"
        "print(stats['records_in'])\n"
    )
    # Run outside the checkout, so the installed package is imported, not
    # crates/python/python.
    res = subprocess.run([str(py), "-c", script, str(src), str(ours)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, env=fresh_env)
    assert res.returncode == 0, f"alnsort.sort in the fresh venv failed:\n{res.stderr[-3000:]}"
    records = sum(1 for ln in src.read_text().splitlines() if not ln.startswith("@"))
    assert int(res.stdout.strip()) == records
    theirs = tmp_path / "binary.bam"
    harness.check_ok(harness.run_alnsort(["--no-PG", "-@", "2", "-o", str(theirs), str(src)]))
    assert ours.read_bytes() == theirs.read_bytes(), "the installed wheel's output differs from the binary's"


def test_third_party_licenses_file_is_current():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "third-party-licenses.py"), "--check"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    text = (ROOT / "THIRD-PARTY-LICENSES.txt").read_text()
    lock = tomllib.loads((ROOT / "Cargo.lock").read_text())
    locked = {(p["name"], p["version"]) for p in lock["package"]}
    # Every crate named is one Cargo.lock resolves, and the ones every
    # build links are there with a license text.
    named = set(re.findall(r"(?m)^={78}\n(\S+) (\S+)\nLicense: ", text))
    assert len(named) > 50, f"only {len(named)} crates named"
    assert named <= locked, sorted(named - locked)
    for crate in ("rayon", "regex", "libdeflater", "libdeflate-sys", "lz4_flex", "noodles-cram"):
        assert any(n == crate for n, _ in named), f"{crate} missing from THIRD-PARTY-LICENSES.txt"
    assert "--- libdeflate/COPYING ---" in text, "the bundled C library's license is missing"


def _render_recipe() -> dict:
    # Both come with the test requirements (jinja2 with multiqc, yaml with ray).
    import jinja2
    import yaml

    # What conda-build's Jinja context gives these names, enough to check
    # the recipe's shape (conda-build is not installed here).
    def compiler(lang: str) -> str:
        return f"{lang}_compiler_stub"

    def stdlib(lang: str) -> str:
        return f"{lang}_stdlib_stub"

    def pin_subpackage(name: str, max_pin: str = "x") -> str:
        return f"{name} pinned {max_pin}"

    text = (RECIPE / "meta.yaml").read_text()
    rendered = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(text).render(
        compiler=compiler, stdlib=stdlib, pin_subpackage=pin_subpackage
    )
    return yaml.safe_load(rendered)


def test_conda_recipe_has_biocondas_shape():
    meta = _render_recipe()
    assert meta["package"] == {"name": "alnsort", "version": cargo_version()}
    assert (RECIPE / meta["source"]["path"]).resolve() == ROOT, "source.path must be the repository root"
    build = meta["requirements"]["build"]
    for need in ("c_compiler_stub", "rust_compiler_stub", "c_stdlib_stub", "cargo-bundle-licenses"):
        assert need in build, f"requirements.build lacks {need}: {build}"
    # 0.x: a new minor version may break, so pin to x.x (bioconda's rule).
    assert meta["build"]["run_exports"] == ["alnsort pinned x.x"]
    assert "alnsort --version" in meta["test"]["commands"]
    assert meta["about"]["license"] == "MIT"
    assert (ROOT / "LICENSE").is_file()
    assert meta["about"]["license_file"] == ["LICENSE", "THIRDPARTY.yml"]
    script = (RECIPE / "build.sh").read_text()
    assert "cargo-bundle-licenses --format yaml --output" in script and "THIRDPARTY.yml" in script
    assert "cargo install --locked" in script and "--path crates/cli" in script
    res = subprocess.run(["bash", "-n", str(RECIPE / "build.sh")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
