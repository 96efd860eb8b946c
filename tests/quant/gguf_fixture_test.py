"""The committed gguf fixture (testdata/quant) is what the installed gguf package produces today."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fixture_is_current():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_quant_fixture.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
