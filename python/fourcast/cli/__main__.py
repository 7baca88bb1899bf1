import sys

from fourcast.cli import main

sys.exit(main())
