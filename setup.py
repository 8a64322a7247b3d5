"""Installation of tuna. Pins what must be pinned: apache-tvm-ffi 0.1.15.post2 crashes MetaSchedule."""

from setuptools import find_packages, setup

setup(
    name="tuna",
    version="0.1.0",
    description="Static cost models that let TVM MetaSchedule tune for CPUs and NVIDIA GPUs it cannot run on",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["tuna", "tuna.*"]),
    package_data={
        "tuna.data": [
            "abi.toml", "targets/*.toml", "uarch/*.toml", "gpu/*.toml", "coeffs/*.toml",
            "pools/*.json", "pools/README.md",
            "databases/*/*.json.gz", "databases/*/LICENSE", "databases/*/README.md",
        ]
    },
    install_requires=[
        "apache-tvm==0.27.0.post1",
        "apache-tvm-ffi==0.1.14.post0",
        "numpy",
        "networkx",
        "islpy",
        "capstone>=5,<6",  # the AArch64 compare-alias workaround in tuna/cpu/disassembly.py is for 5.x
        "pyelftools",
        "psutil",
        "cloudpickle",
        "xgboost",
        "scipy",
        "matplotlib",  # the figures of `tuna bench`
        "dask[distributed]>=2024.1,<2027",
    ],
    extras_require={"test": ["pytest", "ruff", "hypothesis>=6.100"], "plots": ["matplotlib"]},
    entry_points={"console_scripts": ["tuna = tuna.cli:main"]},
)
