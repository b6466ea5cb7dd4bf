import sys

from clusterclip.cli.main import main

sys.exit(main())
