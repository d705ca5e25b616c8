from workers.routing.cli import main

raise SystemExit(main())
