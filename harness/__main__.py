import sys

from attackaudit.cli import main

sys.exit(main())
