from trimaran.serving.graph.server import main

raise SystemExit(main())
