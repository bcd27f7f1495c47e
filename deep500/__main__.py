import sys

from deep500.cli import main

sys.exit(main())
