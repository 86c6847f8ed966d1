"""python -m sparsekernels.bench [options]"""

from .cli import main

raise SystemExit(main())
