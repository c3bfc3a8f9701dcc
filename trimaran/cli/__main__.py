from trimaran.cli import main

main()
