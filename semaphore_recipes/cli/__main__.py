"""``python -m semaphore_recipes.cli``: the same as the ``semaphore-recipes`` script."""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
