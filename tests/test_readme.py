"""The README's Python examples, copied verbatim into a script and run as a user would run
it: in a fresh interpreter, in an empty folder, without a ``__main__`` guard."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def test_the_readme_has_python_examples():
    assert python_blocks()


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_a_readme_example_runs_as_written(index, tmp_path):
    script = tmp_path / f"example{index}.py"
    script.write_text(python_blocks()[index])
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, f"README example {index} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
