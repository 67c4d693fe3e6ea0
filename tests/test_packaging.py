"""The wheel installs one import namespace, `passband`, and nothing generic beside it.

Built for real (`pip wheel`, non-editable), installed into a fresh venv whose only other packages
are the dependencies already installed in this one (a .pth line: no download, no editable finder),
then imported from a directory that holds no checkout.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = {"flows": "flows", "tasks": "tasks", "curation": "curation", "training": "training",
         "infra/cli": "cli", "infra/stack": "stack"}
"""Folder of the checkout -> its package under passband/ (pyproject.toml's package-dir)."""


def test_roots_are_pyprojects_package_dirs() -> None:
    package_dir = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert {folder: name.removeprefix("passband.") for name, folder in package_dir.items()} == ROOTS


def test_the_gpu_image_copies_every_package_folder() -> None:
    # a folder the image leaves out fails `pip install .` inside `docker build`, far from here
    copied = re.findall(r"^COPY (\S+) \1$", (REPO / "infra" / "passband.Dockerfile").read_text(), flags=re.M)
    assert set(copied) == set(ROOTS)


def test_wheel_installs_only_the_passband_namespace(tmp_path: Path) -> None:
    # Built from a copy: setuptools builds in the source tree and would leave build/ in the checkout.
    source = tmp_path / "source"
    for root in ROOTS:  # infra/cli and infra/stack alone: the rest of infra/ is not in the wheel
        shutil.copytree(REPO / root, source / root, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(source)], check=True)
    (wheel,) = (tmp_path / "dist").glob("passband-*.whl")
    names = zipfile.ZipFile(wheel).namelist()

    # Every module of the six folders is in the wheel, under passband/ and nowhere else.
    sources = sorted(f"passband/{package}/{path.relative_to(REPO / root).as_posix()}" for root, package in ROOTS.items()
                     for path in (REPO / root).rglob("*.py") if "__pycache__" not in path.parts)
    assert sorted(n for n in names if n.endswith(".py")) == sources
    assert "passband/flows/presets/rl/demo.yaml" in names
    top_level = {name.split("/")[0] for name in names if not name.startswith("passband-")}
    assert top_level == {"passband"}

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True)
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # A path line adds this venv's site-packages for the dependencies; .pth files inside it (the
    # editable finder of the checkout) are not processed, so only the wheel provides passband.
    Path(site, "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")

    probe = ("import importlib.util, passband.training.rl, passband.stack.local, passband.cli.main, passband.flows.config as c; "
             "print(passband.training.rl.__file__); print(c.PRESETS_DIR.joinpath('rl', 'demo.yaml').is_file()); "
             "print([m for m in ('flows', 'tasks', 'curation', 'training', 'cli', 'stack', 'infra') if importlib.util.find_spec(m)])")
    out = subprocess.run([python, "-c", probe], check=True, capture_output=True, text=True,
                         cwd=tmp_path).stdout.split("\n")
    assert out[0].startswith(site) and out[0].endswith("passband/training/rl/__init__.py")
    assert out[1] == "True"
    assert out[2] == "[]"
