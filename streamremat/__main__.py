"""``python -m streamremat`` runs the CLI."""

from streamremat.cli import main

raise SystemExit(main())
