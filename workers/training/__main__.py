from workers.training.cli import main

raise SystemExit(main())
