"""`python -m larbinpy` is the `larbinpy` command."""

import sys

from larbinpy.cli import main

sys.exit(main())
