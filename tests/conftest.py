import sys
from pathlib import Path

# Let the tests import their helpers (tests/golden.py) and the project from a plain checkout.
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
