"""Exporting the tuned schedule as a module to deploy: a shared library that runs here (tuned for this
machine's own preset; the test skips on a CPU tuna has none for), AArch64 objects without a cross linker, CUDA libraries
built by nvcc without a GPU (those tests skip when nvcc is missing), and the errors."""

import io
import os
import sys
import tarfile

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

import tuna
from tuna.errors import ExportError
from tuna.gpu import nvcc

integration = pytest.importorskip("tuna.integration")
tvm = pytest.importorskip("tvm")

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc (CUDA toolkit) is not installed")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, host):
    work = tmp_path_factory.mktemp("work")
    return tuna.tune("GMM:0", host, work, max_trials=8, num_trials_per_iter=8, population_size=32, workers=1)


@pytest.fixture(scope="module")
def gmm():
    return integration.load_workload("GMM:0")


def _elf_machine(data: bytes) -> str:
    return ELFFile(io.BytesIO(data)).header["e_machine"]


def test_a_schedule_tuned_for_this_cpu_exports_to_a_shared_library_that_computes_the_matmul(tuned, tmp_path, host):
    info = tuned.export(tmp_path / "gmm.so")
    assert (info.format, info.entry) == ("so", "main")
    assert info.args == ("X: float32[1, 128, 128]", "Y: float32[1, 128, 128]", "Z: float32[1, 128, 128]")
    assert 'load_module("gmm.so")["main"](X, Y, Z)' in info.note
    assert str(info).startswith(f"wrote {tmp_path / 'gmm.so'} (x86-64 shared library, {host}")
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((1, 128, 128), dtype=np.float32) for _ in range(2))
    args = [tvm.runtime.tensor(a, tvm.cpu(0)) for a in (x, y, np.zeros_like(x))]
    tvm.runtime.load_module(str(tmp_path / "gmm.so"))["main"](*args)
    np.testing.assert_allclose(args[2].numpy(), x @ y, rtol=1e-4, atol=1e-4)
    # The object files link on the device as TVM's loader does here.
    tar = tuna.export(tuned, None, tmp_path / "gmm.tar")
    assert tar.members == ("lib0.o",)
    args[2] = tvm.runtime.tensor(np.zeros_like(x), tvm.cpu(0))
    tvm.runtime.load_module(str(tmp_path / "gmm.tar"))["main"](*args)
    np.testing.assert_allclose(args[2].numpy(), x @ y, rtol=1e-4, atol=1e-4)


def test_an_aarch64_export_writes_aarch64_objects_without_a_cross_linker(gmm, tmp_path):
    obj = tuna.export(gmm, "graviton2", tmp_path / "out" / "gmm.o")  # missing directories are made
    assert obj.description == "AArch64 object file"
    assert _elf_machine((tmp_path / "out" / "gmm.o").read_bytes()) == "EM_AARCH64"
    assert "g++ -shared -fPIC -o gmm.so gmm.o" in obj.note
    tar = tuna.export(gmm, "graviton2", tmp_path / "gmm.tar")
    with tarfile.open(tmp_path / "gmm.tar", "r:*") as archive:
        members = {m.name.removeprefix("./"): archive.extractfile(m).read() for m in archive if m.isfile()}
    assert set(members) == set(tar.members) == {"lib0.o"}
    assert _elf_machine(members["lib0.o"]) == "EM_AARCH64"


def test_an_aarch64_shared_library_without_a_cross_linker_says_what_to_do(gmm, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no aarch64-linux-gnu-g++ there unless installed
    if integration.export._cross_linker("aarch64-linux-gnu"):
        pytest.skip("an AArch64 cross linker is installed")
    with pytest.raises(ExportError, match=r"gmm\.so.*aarch64-linux-gnu-g\+\+.*gmm\.tar.*g\+\+ -shared"):
        tuna.export(gmm, "graviton2", tmp_path / "gmm.so")
    assert not (tmp_path / "gmm.so").exists()


@pytest.fixture(scope="module")
def cuda_gmm(gmm):
    from tuna.integration.cuda import sample_candidates

    return sample_candidates(gmm, integration.tvm_target(tuna.preset("a100")), 1, seed=3)[0]


@needs_nvcc
def test_a_cuda_export_is_a_library_with_gpu_code_built_without_a_gpu(cuda_gmm, tmp_path):
    info = tuna.export(cuda_gmm, "a100", tmp_path / "gmm.so")
    assert info.description == "x86-64 shared library with sm_80 machine code (tvm-ffi)"
    data = (tmp_path / "gmm.so").read_bytes()
    elf = ELFFile(io.BytesIO(data))
    assert elf.header["e_machine"] == "EM_X86_64"
    assert elf.get_section_by_name(".nv_fatbin") is not None  # the kernels, compiled by nvcc
    # It loads here; calling it checks its arguments before reaching for a GPU.
    main = tvm.runtime.load_module(str(tmp_path / "gmm.so"))["main"]
    cpu = tvm.runtime.tensor(np.zeros((1, 128, 128), np.float32), tvm.cpu(0))
    with pytest.raises(ValueError, match="expected cuda"):
        main(cpu, cpu, cpu)
    source = tuna.export(cuda_gmm, "a100", tmp_path / "gmm.cu")
    text = (tmp_path / "gmm.cu").read_text()
    assert "__global__" in text and "__tvm_ffi_main" in text
    assert "-arch=sm_80" in source.note
    ptx = tuna.export(cuda_gmm, "a100", tmp_path / "gmm.ptx")
    assert ptx.description == "PTX of the kernels for sm_80"
    assert ".entry main_kernel" in (tmp_path / "gmm.ptx").read_text()


@needs_nvcc
def test_a_gpu_nvcc_cannot_compile_for_gets_its_kernels_as_cuda_c(gmm, tmp_path):
    from tuna.integration.cuda import sample_candidates

    if "sm_70" in nvcc.supported_archs(nvcc.find_nvcc()):
        pytest.skip("this nvcc still compiles for sm_70")
    sch = sample_candidates(gmm, integration.tvm_target(tuna.preset("v100")), 1, seed=3)[0]
    info = tuna.export(sch, "v100", tmp_path / "gmm.so")
    assert "kernels as CUDA C" in info.description and "cannot compile for sm_70" in info.description
    assert "NVRTC" in info.note
    assert b"__global__" in (tmp_path / "gmm.so").read_bytes()  # the source the device compiles


def test_without_nvcc_a_cuda_library_embeds_its_kernels_as_cuda_c(cuda_gmm, tmp_path, monkeypatch):
    monkeypatch.setenv("TUNA_NVCC", "/nonexistent/nvcc")
    info = tuna.export(cuda_gmm, "a100", tmp_path / "gmm.so")
    assert "kernels as CUDA C (no nvcc was found)" in info.description
    assert "not compiled here" in info.note
    tar = tuna.export(cuda_gmm, "a100", tmp_path / "gmm.tar")
    assert set(tar.members) == {"lib0.o", "devc.o"}
    with pytest.raises(ExportError, match=r"gmm\.ptx.*nvcc"):
        tuna.export(cuda_gmm, "a100", tmp_path / "gmm.ptx")


def test_bad_suffixes_and_unwritable_paths_are_export_errors_naming_the_file(gmm, tmp_path):
    with pytest.raises(ExportError, match=r"gmm\.dll for zen4.*unknown suffix '\.dll'.*\.so, \.tar, \.o"):
        tuna.export(gmm, "zen4", tmp_path / "gmm.dll")
    with pytest.raises(ExportError, match=r"gmm\.o for a100.*host code without the kernels"):
        tuna.export(gmm, "a100", tmp_path / "gmm.o")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ExportError, match=r"cannot write .*file/gmm\.o: cannot create directory"):
        tuna.export(gmm, "zen4", blocker / "gmm.o")
    (tmp_path / "d.o").mkdir()
    with pytest.raises(ExportError, match=r"d\.o: it is a directory"):
        tuna.export(gmm, "zen4", tmp_path / "d.o")
    with pytest.raises(tuna.TunaError, match="needs a target"):
        tuna.export(gmm, None, tmp_path / "gmm.o")


_GPU_LOOP = """
@T.prim_func
def main(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for i in T.thread_binding(64, thread="threadIdx.x"):
        B[i] = A[i] + T.float32(1)
"""


def test_a_schedule_tvm_cannot_compile_is_an_export_error(tmp_path):
    mod = integration.parse_tvmscript(_GPU_LOOP, "a GPU loop")  # compiled for a CPU below
    with pytest.raises(ExportError, match=r"TVM could not compile the schedule \(exporting .*gmm\.o for zen4"):
        tuna.export(mod, "zen4", tmp_path / "gmm.o")


@pytest.mark.parametrize("name", ["gmm.o", "gmm.so"])
def test_a_full_temporary_directory_is_an_export_error_not_the_end_of_the_process(tmp_path, private_mounts, name):
    """LLVM ends the process when it cannot write an object file (exit 1, "LLVM ERROR")."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    script = ("import sys, tuna\n"
              "from tuna.errors import ExportError\n"
              "try:\n"
              f"    tuna.export(tuna.integration.load_workload('GMM:0'), 'zen4', {str(tmp_path / name)!r})\n"
              "except ExportError as err:\n"
              "    sys.exit(f'ExportError: {err}')\n")
    done = private_mounts(f"mount -t tmpfs -o size=72k tmpfs {scratch}; head -c 65536 /dev/zero > {scratch}/fill",
                          [sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TMPDIR": str(scratch)})
    assert done.returncode == 1 and "LLVM ERROR" not in done.stderr, done.stderr[-2000:]
    assert f"ExportError: cannot write {tmp_path / name}: {scratch} has 8 KiB free (is the disk full?)" in done.stderr
    assert not (tmp_path / name).exists()
