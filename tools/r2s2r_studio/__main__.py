from r2s2r_studio.main import main

raise SystemExit(main())
