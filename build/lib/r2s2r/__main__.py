from r2s2r.cli import main

main()
