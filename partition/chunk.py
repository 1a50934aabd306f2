from dsgraph.cli.chunk import main

if __name__ == "__main__":
    main()
