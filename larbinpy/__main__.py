"""`python -m larbinpy` is the `larbinpy` command."""

import sys

from .cli import main

sys.exit(main())
