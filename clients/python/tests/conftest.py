import os
import sys
from pathlib import Path

# The test helpers, and the package from this tree (src/) unless the tests are asked to use an
# installed one (PROPBUS_PY_INSTALLED=1, e.g. after `pip install ./clients/python` in a venv).
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if os.environ.get("PROPBUS_PY_INSTALLED") != "1":
    sys.path.insert(0, str(HERE.parent / "src"))
