from dsgraph.cli.predict import main

if __name__ == "__main__":
    main()
