"""Builds alpha_attn: Alpha's attention kernels as PyTorch ops.

The extension (csrc/bindings.cpp) is compiled with torch.utils.cpp_extension and linked against the
project's static library (libalpha.a, position-independent), which CMake builds from the repository this
folder sits in:

  ALPHA_BUILD_DIR  an existing CMake build of the project (Ninja generator) to take libalpha.a from,
                   absolute or relative to the repository root; `make test` passes build/release. Its target alpha_lib is brought up to date.
  otherwise        build/python-cpu or build/python-cuda under the repository root, configured here
                   (CUDA when this torch has CUDA and nvcc is found; ALPHA_CUDA=ON|OFF overrides), with
                   only alpha_lib built.
  ALPHA_ROOT       the repository root, when this folder was copied away from it.
  MAX_JOBS         parallel compile jobs for CMake (default: all cores).

The include directories, definitions and link line are read from the build itself (compile_commands.json
and build.ninja), so the extension sees the headers exactly as the library was compiled and links the
same libraries (OpenBLAS, SentencePiece, OpenMP, and cudart/cuBLASLt/NCCL in a CUDA build).

Install with `pip install --no-build-isolation ./python` (torch must be importable while building; pip's
build isolation would hide it).
"""
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError as e:  # pip's build isolation hides the installed torch
    sys.exit(f"alpha_attn: building needs PyTorch importable ({e}); use pip install --no-build-isolation ./python")

HERE = Path(__file__).resolve().parent
ROOT = Path(os.environ.get("ALPHA_ROOT") or HERE.parent).resolve()
if not (ROOT / "src" / "alpha" / "ops" / "attention.h").exists():
    sys.exit(f"alpha_attn: {ROOT} is not the Alpha repository (set ALPHA_ROOT to it)")


def run(cmd):
    print("alpha_attn:", " ".join(shlex.quote(str(c)) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True)


def want_cuda():
    choice = os.environ.get("ALPHA_CUDA", "AUTO").upper()
    if choice in ("ON", "OFF"):
        return choice == "ON"
    has_nvcc = shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").exists()
    return torch.version.cuda is not None and bool(has_nvcc)


def library_build_dir():
    """A CMake build of the project with alpha_lib up to date."""
    jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
    given = os.environ.get("ALPHA_BUILD_DIR")
    if given:
        build = (ROOT / given).resolve()  # a relative path is taken from the repository root
        if not (build / "build.ninja").exists():
            sys.exit(f"alpha_attn: ALPHA_BUILD_DIR={build} is not a configured CMake build (Ninja generator)")
    else:
        cuda = want_cuda()
        build = ROOT / "build" / ("python-cuda" if cuda else "python-cpu")
        if not (build / "build.ninja").exists():
            flags = [] if torch._C._GLIBCXX_USE_CXX11_ABI else ["-D_GLIBCXX_USE_CXX11_ABI=0"]  # match torch's ABI
            cmd = ["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                   "-DALPHA_BUILD_TESTS=OFF", "-DALPHA_DASHBOARD=OFF", f"-DALPHA_CUDA={'ON' if cuda else 'OFF'}"]
            if flags:
                cmd += [f"-DCMAKE_CXX_FLAGS={' '.join(flags)}",
                        f"-DCMAKE_CUDA_FLAGS={' '.join('-Xcompiler=' + f for f in flags)}"]
            if cuda and not shutil.which("nvcc") and Path("/usr/local/cuda/bin/nvcc").exists():
                cmd.append("-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc")
            run(cmd)
    run(["cmake", "--build", build, "--target", "alpha_lib", "-j", jobs])
    return build


def compile_flags(build):
    """The -D, -I and -isystem flags the library's own sources were compiled with."""
    for entry in json.loads((build / "compile_commands.json").read_text()):
        if entry["file"].endswith("src/alpha/ops/attention.cpp"):
            args = entry.get("arguments") or shlex.split(entry["command"])
            break
    else:
        sys.exit(f"alpha_attn: {build}/compile_commands.json has no entry for src/alpha/ops/attention.cpp")
    flags, i = [], 0
    while i < len(args):
        a = args[i]
        if a in ("-isystem", "-I", "-D"):
            flags += [a + args[i + 1]] if a != "-isystem" else [a, args[i + 1]]
            i += 2
            continue
        if a.startswith(("-D", "-I", "-isystem")) or a == "-fopenmp":
            flags.append(a)
        i += 1
    return flags


def link_flags(build):
    """The link line of the `alpha` executable (libalpha.a and its dependencies), from build.ninja."""
    lines = (build / "build.ninja").read_text().splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.startswith("build alpha:"))
    except StopIteration:
        sys.exit(f"alpha_attn: {build}/build.ninja has no `alpha` target to take the link line from")
    variables = {}
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        name, _, value = line.strip().partition(" = ")
        variables[name] = value
    flags = []
    for name in ("LINK_PATH", "LINK_LIBRARIES"):
        for token in shlex.split(variables.get(name, "")):
            if not token.startswith("-") and not os.path.isabs(token):
                token = str(build / token)  # src/libalpha.a, relative to the build
            flags.append(token)
    if not any(t.endswith("libalpha.a") for t in flags):
        sys.exit(f"alpha_attn: no libalpha.a on the link line of {build}/build.ninja")
    return flags


class BuildWithAlpha(BuildExtension):
    """Brings libalpha.a up to date, then compiles and links the extension with the library's flags."""

    def run(self):
        build = library_build_dir()
        cflags, ldflags = compile_flags(build), link_flags(build)
        print(f"alpha_attn: library {build}, CUDA backend {'-DALPHA_WITH_CUDA=1' in cflags}", flush=True)
        # Relinked whenever the library or a header changed, not only the binding's source.
        depends = [str(build / "src" / "libalpha.a")] + [str(p) for p in (ROOT / "src" / "alpha").rglob("*.h")]
        for ext in self.extensions:
            ext.extra_compile_args = ext.extra_compile_args + cflags
            ext.extra_link_args = ext.extra_link_args + ldflags
            ext.depends = ext.depends + depends
        super().run()


setup(
    name="alpha_attn",
    version="0.1.0",
    description="Alpha's attention kernels (flash attention, JVP, HVP, NSA) as PyTorch ops",
    packages=["alpha_attn"],
    python_requires=">=3.9",
    ext_modules=[CppExtension(
        "alpha_attn._C",
        ["csrc/bindings.cpp"],
        extra_compile_args=["-std=c++20", "-O2", "-fopenmp", "-Wno-deprecated-declarations"],  # torch's headers in C++20
        # Export PyInit__C alone (csrc/exports.map says why).
        extra_link_args=[f"-Wl,--version-script={HERE / 'csrc' / 'exports.map'}"],
    )],
    cmdclass={"build_ext": BuildWithAlpha},
    zip_safe=False,
)
