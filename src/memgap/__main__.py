import sys

from memgap.cli import main

sys.exit(main())
