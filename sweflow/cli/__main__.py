from sweflow.cli.entry import main

main()
