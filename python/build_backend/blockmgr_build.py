"""The PEP 517 build backend of the blockmgr Python package (python/pyproject.toml).

It builds the module with the project's own CMake, the one place its sources are listed
(python/CMakeLists.txt: the extension ``bm_python_extension`` and the pure-Python files copied
beside it), and packs ``<build>/python/blockmgr`` into a wheel. It uses only the standard
library, so pip's isolated build environment has nothing to download: ``pip install ./python``
works in a fresh venv without a package index, from Debian's compilers and -dev packages.

Settings (``pip install --config-settings key=value``, or the environment):

- ``build-dir`` / ``BLOCKMGR_BUILD_DIR``: the CMake build folder to use and keep (a later
  build reuses its objects). By default a temporary folder, removed afterwards.
- ``build-type`` / ``BLOCKMGR_BUILD_TYPE``: CMAKE_BUILD_TYPE (RelWithDebInfo, the project's
  default, whose objects ccache may already hold).

ccache is used when installed. The wheel's extension is stripped of its debug information.
"""

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

NAME = "blockmgr"
# The CMake target of the extension (python/CMakeLists.txt).
EXTENSION_TARGET = "bm_python_extension"


class BuildError(Exception):
    pass


def _package_root():
    # pip runs the backend in the folder holding pyproject.toml: python/ of a checkout.
    return os.path.abspath(os.getcwd())


def _project_root():
    root = os.path.dirname(_package_root())
    if not os.path.isfile(os.path.join(root, "CMakeLists.txt")):
        raise BuildError(
            f"blockmgr: {root} holds no CMakeLists.txt; build the Python package from a "
            "blockmgr checkout (pip install ./python from its root)")
    return root


def _version():
    with open(os.path.join(_project_root(), "CMakeLists.txt"), encoding="utf-8") as f:
        match = re.search(r"project\(\s*blockmgr\s+VERSION\s+([0-9.]+)", f.read())
    if not match:
        raise BuildError("blockmgr: no project(blockmgr VERSION ...) in CMakeLists.txt")
    return match.group(1)


def _pyproject():
    path = os.path.join(_package_root(), "pyproject.toml")
    if tomllib is None:
        return {}
    with open(path, "rb") as f:
        return tomllib.load(f).get("project", {})


def _metadata():
    project = _pyproject()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {NAME}",
        f"Version: {_version()}",
    ]
    if "description" in project:
        lines.append(f"Summary: {project['description']}")
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    for extra, requirements in sorted(project.get("optional-dependencies", {}).items()):
        lines.append(f"Provides-Extra: {extra}")
        for requirement in requirements:
            lines.append(f'Requires-Dist: {requirement}; extra == "{extra}"')
    for requirement in project.get("dependencies", []):
        lines.append(f"Requires-Dist: {requirement}")
    body = ""
    readme = project.get("readme")
    if isinstance(readme, str) and os.path.isfile(os.path.join(_package_root(), readme)):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(_package_root(), readme), encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _tag():
    # The extension is built for this interpreter: cp311-cp311-linux_x86_64.
    version = f"{sys.version_info.major}{sys.version_info.minor}"
    interpreter = f"cp{version}" if sys.implementation.name == "cpython" else f"py{version}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{interpreter}-{interpreter}-{platform}"


def _dist_info():
    return f"{NAME}-{_version()}.dist-info"


def _wheel_file():
    return ("Wheel-Version: 1.0\nGenerator: blockmgr_build\nRoot-Is-Purelib: false\n"
            f"Tag: {_tag()}\n")


def _setting(config_settings, key, variable, default=None):
    value = (config_settings or {}).get(key)
    if value is None:
        value = os.environ.get(variable, default)
    return value


def _run(command):
    print("blockmgr_build: " + " ".join(command), file=sys.stderr, flush=True)
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stderr.write(result.stdout)
    if result.returncode != 0:
        raise BuildError(f"blockmgr: {command[0]} failed (exit {result.returncode}); "
                         "its output is above")
    return result.stdout


def _build_module(build_dir, build_type):
    """Configures and builds the extension target; returns the folder holding the package."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise BuildError("blockmgr: cmake not found (apt-get install cmake, or run "
                         "deploy/install-deps.sh)")
    configure = [cmake, "-S", _project_root(), "-B", build_dir,
                 f"-DCMAKE_BUILD_TYPE={build_type}", "-DBM_BUILD_TESTS=OFF",
                 # The interpreter the wheel is for, not /usr/bin/python3 that the project's
                 # CMake picks by default (a venv's python has the same ABI, other paths).
                 f"-DPython3_EXECUTABLE={sys.executable}"]
    if shutil.which("ccache"):
        configure += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache",
                      "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
    output = _run(configure)
    if "python: building the blockmgr module" not in output:
        why = [line.strip() for line in output.splitlines() if "python:" in line]
        raise BuildError("blockmgr: CMake does not build the Python module here: " +
                         ("; ".join(why) or "see its output above"))
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    _run([cmake, "--build", build_dir, "--target", EXTENSION_TARGET, "-j", jobs])
    return os.path.join(build_dir, "python", NAME)


def _package_files(package_dir):
    """(path in the wheel, path on disk) of the package CMake assembled."""
    files = []
    for name in sorted(os.listdir(package_dir)):
        path = os.path.join(package_dir, name)
        if os.path.isfile(path) and not name.endswith(".pyc"):
            files.append((f"{NAME}/{name}", path))
    if not any(name.startswith(f"{NAME}/_blockmgr") and name.endswith(".so") for name, _ in files):
        raise BuildError(f"blockmgr: the build left no _blockmgr extension in {package_dir}")
    return files


def _strip(path, scratch):
    strip = shutil.which("strip")
    if strip is None or not path.endswith(".so"):
        return path
    stripped = os.path.join(scratch, os.path.basename(path))
    shutil.copyfile(path, stripped)
    subprocess.run([strip, "--strip-debug", stripped], check=True)
    return stripped


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory, files, scratch):
    dist_info = _dist_info()
    wheel_name = f"{NAME}-{_version()}-{_tag()}.whl"
    contents = []
    for name, path in files:
        with open(_strip(path, scratch), "rb") as f:
            contents.append((name, f.read()))
    contents.append((f"{dist_info}/METADATA", _metadata().encode()))
    contents.append((f"{dist_info}/WHEEL", _wheel_file().encode()))
    contents.append((f"{dist_info}/top_level.txt", f"{NAME}\n".encode()))
    record = [_record_line(name, data) for name, data in contents]
    record.append(f"{dist_info}/RECORD,,")
    contents.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    os.makedirs(wheel_directory, exist_ok=True)
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w",
                         zipfile.ZIP_DEFLATED) as wheel:
        for name, data in contents:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            wheel.writestr(info, data)
    return wheel_name


# ---- PEP 517 hooks


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    path = os.path.join(metadata_directory, _dist_info())
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    with open(os.path.join(path, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(_wheel_file())
    return _dist_info()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    build_type = _setting(config_settings, "build-type", "BLOCKMGR_BUILD_TYPE", "RelWithDebInfo")
    build_dir = _setting(config_settings, "build-dir", "BLOCKMGR_BUILD_DIR")
    with tempfile.TemporaryDirectory(prefix="blockmgr-wheel-") as scratch:
        if build_dir:
            build_dir = os.path.abspath(build_dir)
        else:
            build_dir = os.path.join(scratch, "build")
        package_dir = _build_module(build_dir, build_type)
        return _write_wheel(wheel_directory, _package_files(package_dir), scratch)
