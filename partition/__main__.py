from dsgraph.cli.partition import main

if __name__ == "__main__":
    main()
