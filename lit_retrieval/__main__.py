"""`python -m lit_retrieval` behaves like the `lit-retrieval` console script."""

from lit_retrieval.cli import main

if __name__ == "__main__":
    main()
