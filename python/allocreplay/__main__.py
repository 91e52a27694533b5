from allocreplay.cli import main

main()
